#!/usr/bin/env python3
"""What an operator's schema costs per call from Python, by argument and return type: the host time of
``torch.ops`` calls of small C++ operators (CPU kernels that allocate one (M, I) output, as the FP8 packed
operator does) whose schemas differ in one thing each. Compiles them with ``torch.utils.cpp_extension``
(a C++ compiler, no GPU). Prints the minimum over repeats of the mean microseconds per call.

Usage: ``python3 tools/op_arg_cost.py [--repeats 15] [--calls 20000]``
"""
from __future__ import annotations

import argparse
import tempfile
import timeit
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

SOURCE = r"""
#include <torch/library.h>
#include <ATen/ATen.h>
using T = at::Tensor;
using O = std::optional<at::Tensor>;
T y_of(T const& x, T const& w) { return at::empty({x.size(0), w.size(0) / 2}, x.options().dtype(at::kBFloat16)); }
T dtype_arg(T x, T w, O xs, T ws, O os, std::string s, at::ScalarType dt, std::string c) { return y_of(x, w); }
T bool_arg(T x, T w, O xs, T ws, O os, std::string s, bool e4m3, std::string c) { return y_of(x, w); }
T int_arg(T x, T w, O xs, T ws, O os, std::string s, int64_t code, std::string c) { return y_of(x, w); }
T no_flag(T x, T w, O xs, T ws, O os, std::string s, std::string c) { return y_of(x, w); }
T no_optional(T x, T w, T xs, T ws, std::string s, bool e4m3, std::string c) { return y_of(x, w); }
std::tuple<T, T> pair_empty(T x, T w, O xs, T ws, O os, std::string s, bool e4m3, std::string c) {
  return {y_of(x, w), at::empty({0, 0}, x.options().dtype(at::kFloat))};
}
std::tuple<T, O> pair_none(T x, T w, O xs, T ws, O os, std::string s, bool e4m3, std::string c) {
  return {y_of(x, w), std::nullopt};
}
TORCH_LIBRARY(fsw_arg_cost, m) {
  m.def("dtype_arg(Tensor x, Tensor w, Tensor? xs, Tensor ws, Tensor? os, str s, ScalarType dt, str c) -> Tensor");
  m.def("bool_arg(Tensor x, Tensor w, Tensor? xs, Tensor ws, Tensor? os, str s, bool e4m3, str c) -> Tensor");
  m.def("int_arg(Tensor x, Tensor w, Tensor? xs, Tensor ws, Tensor? os, str s, int code, str c) -> Tensor");
  m.def("no_flag(Tensor x, Tensor w, Tensor? xs, Tensor ws, Tensor? os, str s, str c) -> Tensor");
  m.def("no_optional(Tensor x, Tensor w, Tensor xs, Tensor ws, str s, bool e4m3, str c) -> Tensor");
  m.def("pair_empty(Tensor x, Tensor w, Tensor? xs, Tensor ws, Tensor? os, str s, bool e4m3, str c) -> (Tensor, Tensor)");
  m.def("pair_none(Tensor x, Tensor w, Tensor? xs, Tensor ws, Tensor? os, str s, bool e4m3, str c) -> (Tensor, Tensor?)");
}
TORCH_LIBRARY_IMPL(fsw_arg_cost, CPU, m) {
  m.impl("dtype_arg", &dtype_arg); m.impl("bool_arg", &bool_arg); m.impl("int_arg", &int_arg);
  m.impl("no_flag", &no_flag); m.impl("no_optional", &no_optional); m.impl("pair_empty", &pair_empty);
  m.impl("pair_none", &pair_none);
}
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "fsw_arg_cost.cpp"
        src.write_text(SOURCE)
        load(name="fsw_arg_cost", sources=[str(src)], is_python_module=False, build_directory=d)
    ops = torch.ops.fsw_arg_cost
    x, w, xs, ws = torch.zeros(1, 896), torch.zeros(9728, 896), torch.ones(1), torch.ones(9728)
    calls = {
        "ScalarType out_dtype": lambda: ops.dtype_arg.default(x, w, xs, ws, None, "row", torch.bfloat16, ""),
        "bool e4m3_out": lambda: ops.bool_arg.default(x, w, xs, ws, None, "row", False, ""),
        "int code": lambda: ops.int_arg.default(x, w, xs, ws, None, "row", 15, ""),
        "no flag": lambda: ops.no_flag.default(x, w, xs, ws, None, "row", ""),
        "bool, no optional tensors": lambda: ops.no_optional.default(x, w, xs, ws, "row", False, ""),
        "bool, (y, empty) returned": lambda: ops.pair_empty.default(x, w, xs, ws, None, "row", False, ""),
        "bool, (y, None) returned": lambda: ops.pair_none.default(x, w, xs, ws, None, "row", False, ""),
        "torch.empty(0, 0) alone": lambda: torch.empty(0, 0),
    }
    best = {k: float("inf") for k in calls}
    with torch.inference_mode():
        for _ in range(args.repeats):
            for k, f in calls.items():
                best[k] = min(best[k], timeit.timeit(f, number=args.calls) / args.calls * 1e6)
    for k, us in best.items():
        print(f"{k:28s} {us:6.2f} us per call")


if __name__ == "__main__":
    main()
