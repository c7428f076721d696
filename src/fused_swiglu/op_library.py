"""The ``fused_swiglu`` operator namespace (torch.library): the one ``DEF`` library on which every
operator's schema is defined (:mod:`fused_swiglu.ops`, :mod:`fused_swiglu.training_ops`,
:mod:`fused_swiglu.fp8`), kept for the life of the process."""

from __future__ import annotations

import torch

OPS_LIBRARY = torch.library.Library("fused_swiglu", "DEF")  # noqa: TOR901
