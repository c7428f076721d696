"""Whether this process can run the kernels, for the commands that need a Hopper GPU."""

from __future__ import annotations

import torch

NEEDS_HOPPER = "needs an NVIDIA Hopper GPU (compute capability 9.0) with CUDA"


def hopper_problem() -> str | None:
    """None when device 0 is a compute capability 9.0 GPU; else what was found instead."""
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to PyTorch" + (
            "" if torch.version.cuda else f" (torch {torch.__version__} is a CPU-only build)"
        )
    cap = torch.cuda.get_device_capability(0)
    if cap != (9, 0):
        return f"found {torch.cuda.get_device_name(0)} (compute capability {cap[0]}.{cap[1]})"
    return None
