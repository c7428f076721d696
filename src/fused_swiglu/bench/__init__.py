"""Benchmark and accuracy runs behind ``fused-swiglu bench`` and ``fused-swiglu accuracy``.

shapes.py: the Qwen2.5 MLP dimensions. timing.py: the timing protocol (L2 flush, rotated input
sets, warm-up, CUDA events, median with p10/p90). methods.py: the peers and fused methods.
report.py: machine description, tables, JSON and CSV. run.py / accuracy.py: the two commands.
e2e.py (with e2e_models.py, e2e_modes.py, e2e_report.py): ``bench e2e``, whole Hugging Face models
stock vs patched. host_time.py: ``bench host-time``, host time per call at M = 1.
"""
