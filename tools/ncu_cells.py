"""One call each of the packed and dual kernels (the choice) and cuBLAS's GEMM over the concatenated weights,
for Nsight Compute, at Qwen2.5-72B M = 6000 and Qwen2.5-7B M = 8192 (perf-notes entry 89). Two warm-up calls
each outside the profiled range; each profiled call inside an NVTX range named method_M_H_I::

    ncu --clock-control none --profile-from-start off --nvtx --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \
        --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
        --csv --page details python3 tools/ncu_cells.py > ncu.csv
"""

import torch
import fused_swiglu.ops  # noqa: F401 (defines the operators)
from fused_swiglu import pack_gate_up

torch.manual_seed(0)
cells = [(8192, 29568, 6000), (3584, 18944, 8192)]
for H, I, M in cells:
    x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
    wg = torch.randn(I, H, device="cuda", dtype=torch.bfloat16) * H ** -0.5
    wu = torch.randn(I, H, device="cuda", dtype=torch.bfloat16) * H ** -0.5
    wp = pack_gate_up(wg, wu)
    wc = torch.cat([wg, wu])
    runs = [("packed", lambda: torch.ops.fused_swiglu.swiglu_packed(x, wp, "")),
            ("dual", lambda: torch.ops.fused_swiglu.swiglu_dual(x, wg, wu, "")),
            ("cublas", lambda: torch.mm(x, wc.T))]
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
    del x, wg, wu, wp, wc
    torch.cuda.empty_cache()
