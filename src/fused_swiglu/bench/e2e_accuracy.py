"""The accuracy step of ``fused-swiglu bench e2e``: stock and patched against a float32 copy."""

from __future__ import annotations

import copy
import gc

import torch

from .e2e_modes import Settings, generate_kwargs, prompt, set_fused


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return (torch.linalg.vector_norm((x - ref).double()) / torch.linalg.vector_norm(ref.double())).item()


def _top1(x: torch.Tensor, ref: torch.Tensor) -> float:
    """The fraction of positions whose arg-max token in ``x`` is ``ref``'s."""
    return (x.argmax(-1) == ref.argmax(-1)).double().mean().item()


def accuracy(model, s: Settings) -> dict:
    """Greedy agreement and logits error of the patched model, against a float32 deep copy of the
    model (stock forward; freed right after).

    Greedy decoding (batch 1, ``new_tokens`` tokens from the ``prompt_len`` prompt):
    ``token_agreement``, the fraction of tokens equal position by position in stock and patched
    decoding; ``first_mismatch``, the index of the first differing token (None: none); and
    ``stock_fp32_token_agreement`` / ``fused_fp32_token_agreement``, the same fraction against the
    float32 copy's tokens. Once a token differs the continuations differ, and random weights give
    logits that lie close together, so ``first_mismatch`` and the teacher-forced fields below say more.

    One prompt of ``accuracy_prompt_len`` tokens, all positions (teacher-forced):
    ``stock_logits_rel_err`` / ``fused_logits_rel_err`` = ``||logits - logits_fp32|| / ||logits_fp32||``;
    ``stock_top1_vs_fp32`` / ``fused_top1_vs_fp32``, the fraction of positions whose arg-max token
    is the float32 copy's; ``fused_top1_vs_stock``, the same between patched and stock.
    """
    ids = prompt(model, 1, s.accuracy_prompt_len, s.seed + 1, s.device)
    logits, tokens = {}, {}
    gen_ids = prompt(model, 1, s.prompt_len, s.seed, s.device)
    gen_kwargs = generate_kwargs(model, gen_ids, s)
    try:
        for fused in (False, True):
            set_fused(model, fused, s.backend)
            with torch.no_grad():
                logits[fused] = model(input_ids=ids, use_cache=False).logits.float()
            tokens[fused] = model.generate(**gen_kwargs)[0, s.prompt_len:]
    finally:
        set_fused(model, False, s.backend)
    fp32 = copy.deepcopy(model).float()
    try:
        with torch.no_grad():
            ref = fp32(input_ids=ids, use_cache=False).logits.float()
        ref_tokens = fp32.generate(**gen_kwargs)[0, s.prompt_len:]
    finally:
        del fp32
        gc.collect()
        if s.device.type == "cuda":
            torch.cuda.empty_cache()
    same = (tokens[False] == tokens[True]).tolist()
    agree = {f: (tokens[f] == ref_tokens).float().mean().item() for f in (False, True)}
    return {"prompt_tokens": s.accuracy_prompt_len, "new_tokens": len(same),
            "token_agreement": sum(same) / len(same), "first_mismatch": same.index(False) if False in same else None,
            "stock_fp32_token_agreement": agree[False], "fused_fp32_token_agreement": agree[True],
            "stock_logits_rel_err": _rel_err(logits[False], ref), "fused_logits_rel_err": _rel_err(logits[True], ref),
            "stock_top1_vs_fp32": _top1(logits[False], ref), "fused_top1_vs_fp32": _top1(logits[True], ref),
            "fused_top1_vs_stock": _top1(logits[True], logits[False])}
