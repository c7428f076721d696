"""Benchmark and accuracy runs behind ``fused-swiglu bench`` and ``fused-swiglu accuracy``.

shapes.py: the Qwen2.5 MLP dimensions. timing.py: the timing protocol (L2 flush, rotated input
sets, warm-up, CUDA events, median with p10/p90). methods.py: the peers and fused methods.
report.py: machine description, tables, JSON and CSV. run.py / accuracy.py: the two commands.
"""
