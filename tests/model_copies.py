"""Copies of a model as users make them: through torch.save and torch.load, or with copy.deepcopy."""

from __future__ import annotations

import copy
import io

import torch


def saved_and_loaded(obj):
    """``obj`` written by torch.save into memory and read back by torch.load (weights_only=False: whole
    modules)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


# how a copy is made (the tests' parameter) -> the function that makes it
COPIES = {"torch.save": saved_and_loaded, "deepcopy": copy.deepcopy}
