"""One call each of the packed and dual kernels and cuBLAS's GEMM over the concatenated weights, for Nsight
Compute: by default the choice at Qwen2.5-72B M = 6000 and Qwen2.5-7B M = 8192 (perf-notes entry 89); with
``--cells`` other problems, with ``--launches`` named launches of either kernel beside the choice (e.g. to set
a launch's DRAM bytes against ``cost_model.dram_traffic``). Two warm-up calls each outside the profiled range;
each profiled call inside an NVTX range named ``method_M_H_I``::

    ncu --clock-control none --profile-from-start off --nvtx --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \\
        --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,\\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \\
        --csv --page details python3 tools/ncu_cells.py [--cells H:I:M ...] [--launches NAME@R:S ...] > ncu.csv

A launch is a bf16 config name without its dtype suffix, optionally with ``@<raster>:<swizzle>``
(``dual_pingpong_128x128x64_2x1@2:4``); its NVTX range is named by it.
"""

import argparse

import torch
import fused_swiglu.ops  # noqa: F401 (defines the operators)
from fused_swiglu import pack_gate_up

DEFAULT_CELLS = ["8192:29568:6000", "3584:18944:8192"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", nargs="+", default=DEFAULT_CELLS, help="H:I:M problems")
    ap.add_argument("--launches", nargs="*", default=[], help="launches timed beside the choice")
    args = ap.parse_args()
    torch.manual_seed(0)
    for cell in args.cells:
        H, I, M = (int(v) for v in cell.split(":"))
        x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
        wg = torch.randn(I, H, device="cuda", dtype=torch.bfloat16) * H ** -0.5
        wu = torch.randn(I, H, device="cuda", dtype=torch.bfloat16) * H ** -0.5
        wp = pack_gate_up(wg, wu)
        wc = torch.cat([wg, wu])
        runs = [("packed", lambda: torch.ops.fused_swiglu.swiglu_packed(x, wp, "")),
                ("dual", lambda: torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, "")),
                ("cublas", lambda: torch.mm(x, wc.T))]
        for launch in args.launches:
            name, _, order = launch.partition("@")
            config = f"{name}_bf16" + (f"@{order}" if order else "")
            if name.startswith("packed"):
                runs.append((launch, lambda c=config: torch.ops.fused_swiglu.swiglu_packed(x, wp, c)))
            else:
                runs.append((launch, lambda c=config: torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, c)))
        for _, f in runs:
            f(); f()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for name, f in runs:
            torch.cuda.nvtx.range_push(f"{name}_M{M}_H{H}_I{I}")
            f()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        runs.clear()  # the operands' last references: freed before the next cell's
        x = wg = wu = wp = wc = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
