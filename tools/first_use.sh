#!/usr/bin/env bash
# Time a first use on a GPU machine without internet, as a new user meets it, and write
# $OUT/first_use.json ({"meta", "rows"}: one row per install, "source" and "wheel", in seconds of wall time, whole processes):
#
#   source    pip install of this checkout into a new virtual environment (dependencies from .whl/,
#             torch from the system), then a first swiglu() call at one shape with an empty cache:
#             the core library, the one config that call needs and the operator library compiled
#   wheel     the same with the binary wheel (dist/*.whl, FUSED_SWIGLU_PREBUILT=1) and no nvcc on PATH
#
# Needs: python3 with torch (CUDA), .whl/ from tools/fetch_wheels.sh (setuptools too), dist/ with
# the binary wheel; nvcc on PATH for the source case.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
WORK="${WORK:-$(mktemp -d)}"  # where the two environments and caches go
CALL='import torch, fused_swiglu
x = torch.randn(1, 896, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4864, 896, device="cuda", dtype=torch.bfloat16)
y = fused_swiglu.swiglu(x, w, w)
torch.cuda.synchronize()
assert y.shape == (1, 4864) and bool(torch.isfinite(y).all())'

first_use() {  # name, pip install arguments...; prints seconds
    local name="$1"; shift
    local venv="$WORK/$name"
    python3 -m venv "$venv"
    # torch (and what it needs) from the machine's own environment, the rest from .whl/
    python3 -c 'import site, sys; print(site.getsitepackages()[0])' \
        > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/machine.pth"
    "$venv/bin/pip" install -q --no-index --find-links .whl setuptools > /dev/null
    local start end
    start=$(date +%s.%N)
    # nvidia-cutlass for its headers only: the dependencies of its Python DSL (cuda-python, scipy, ...),
    # which fused-swiglu does not use, are not carried to a machine without internet
    "$venv/bin/pip" install -q --no-index --find-links .whl --no-deps nvidia-cutlass > "$OUT/first_use_$name.log" 2>&1
    "$venv/bin/pip" install -q --no-index --find-links .whl filelock rich >> "$OUT/first_use_$name.log" 2>&1
    (cd "$WORK" && "$venv/bin/pip" install -q --no-index --no-deps --no-build-isolation "$@") \
        >> "$OUT/first_use_$name.log" 2>&1 || { echo "first use ($name): pip install failed" >&2; return 1; }
    (cd "$WORK" && FUSED_SWIGLU_CACHE_DIR="$WORK/cache-$name" "$venv/bin/python" -c "$CALL") \
        >> "$OUT/first_use_$name.log" 2>&1 || { echo "first use ($name): the first call failed" >&2; return 1; }
    end=$(date +%s.%N)
    python3 -c "print(round($end - $start, 1))"
}

source_s=$(first_use source "$PWD")
wheel=$(ls "$PWD"/dist/fused_swiglu-*.whl | head -1)
nvcc_dir=$(dirname "$(command -v nvcc || echo /nonexistent/nvcc)")
wheel_s=$(PATH=$(echo "$PATH" | tr ':' '\n' | grep -vx "$nvcc_dir" | paste -sd:) CUDA_HOME=/nonexistent \
          first_use wheel "$wheel")
python3 - "$OUT/first_use.json" "$source_s" "$wheel_s" "$wheel" <<'PY'
import json, sys, datetime, torch
path, source_s, wheel_s, wheel = sys.argv[1:]
meta = {"gpu": torch.cuda.get_device_name(), "torch_version": torch.__version__, "kind": "first_use",
        "timestamp": datetime.date.today().isoformat(), "shape": "M=1, H=896, I=4864, bf16",
        "unit": "seconds of wall time from pip install to the first result, whole processes"}
rows = [{"install": "source", "seconds": float(source_s)},
        {"install": "wheel", "wheel": wheel.split("/")[-1], "seconds": float(wheel_s)}]
json.dump({"meta": meta, "rows": rows}, open(path, "w"), indent=2)
print(open(path).read())
PY
