#!/usr/bin/env bash
# The GPU test suite twice on a Hopper machine without internet, once per operator library:
#
#   source  fused_swiglu from ./src; the operator library (libfused_swiglu_torch.so) compiled here from
#           ./csrc/torch by this machine's C++ compiler against its PyTorch, as `pip install -e .`
#           does; the kernel libraries taken from the wheel's prebuilt folder (the same sources)
#   wheel   fused_swiglu installed from the binary wheel, every library as it was built there
#
#   dist/fused_swiglu-*.whl   the binary wheel (FUSED_SWIGLU_PREBUILT=1 pip wheel ...); where dist/ holds none, it is
#                             built here first, into dist/, from the build cache (BUILD_CACHE_DIR, default
#                             /tmp/fsw-cache; CACHE_TAR, default .fsw-carry/cache.tar.xz, unpacked into it where it
#                             exists: any machine's cache of these sources with the same nvcc --version text serves)
#   .whl/*.whl                wheels of missing pure-Python dependencies (tools/fetch_wheels.sh)
#   OUT                       where the logs go (default ./out)
#   PYTEST_ARGS               extra pytest arguments
#   SUITES                    which suites to run (default "source wheel")
#   PART                      k/n: only the k-th of n parts of the test files that hold GPU tests (sorted, every
#                             n-th from the k-th), so that a suite longer than one call's time limit runs in n calls
# Before each suite it runs the bad-shape-after-a-good-call snippet of the README's limits. Exit
# status: 0 when both suites pass.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
SITE=/tmp/fsw-gpu-suites/deps
WHEEL=/tmp/fsw-gpu-suites/wheel
LIBS=/tmp/fsw-gpu-suites/libs
rm -rf /tmp/fsw-gpu-suites && mkdir -p "$SITE" "$WHEEL" "$LIBS"
. tools/carried_wheels.sh && carried_wheels "$SITE" || exit 2
if ! compgen -G "dist/fused_swiglu-*.whl" >/dev/null; then
    BUILD_CACHE_DIR="${BUILD_CACHE_DIR:-/tmp/fsw-cache}"
    CACHE_TAR="${CACHE_TAR:-.fsw-carry/cache.tar.xz}"
    mkdir -p "$BUILD_CACHE_DIR" dist
    [ -f "$CACHE_TAR" ] && { tar -xJf "$CACHE_TAR" -C "$BUILD_CACHE_DIR" || exit 2; }
    start=$SECONDS
    PYTHONPATH="$SITE" FUSED_SWIGLU_CACHE_DIR="$BUILD_CACHE_DIR" FUSED_SWIGLU_PREBUILT=1 \
        python3 -m pip wheel . --no-build-isolation --no-deps -w dist -q >"$OUT/wheel_build.log" 2>&1 || {
        echo "the binary wheel did not build: $OUT/wheel_build.log" >&2; tail -n 20 "$OUT/wheel_build.log" >&2; exit 2; }
    echo "built $(ls dist/fused_swiglu-*.whl) in $((SECONDS - start)) s" | tee -a "$OUT/suites.log"
fi
python3 -m pip install -q --no-index --no-deps --target "$WHEEL" dist/fused_swiglu-*.whl || exit 2
cp "$WHEEL"/fused_swiglu/_prebuilt/* "$LIBS"/ && rm -f "$LIBS/libfused_swiglu_torch.so"

SNIPPET='
import torch
from fused_swiglu import swiglu
x = torch.randn(33, 896, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4864, 896, device="cuda", dtype=torch.bfloat16)
swiglu(x, w, w)
xb = torch.randn(33, 900, device="cuda", dtype=torch.bfloat16)
wb = torch.randn(4864, 900, device="cuda", dtype=torch.bfloat16)
try:
    swiglu(xb, wb, wb)
    print("snippet: no error")
except ValueError as e:
    print("snippet: ValueError:", e)
from fused_swiglu import _lib
print("operator library:", _lib._torch_ops._name)
'

FILES=()
if [ -n "${PART:-}" ]; then
    k=${PART%/*} n=${PART#*/}
    if ! [[ $k =~ ^[1-9][0-9]*$ && $n =~ ^[1-9][0-9]*$ ]] || (( k > n )); then
        echo "PART must be k/n with 1 <= k <= n; got PART=$PART" >&2
        exit 2
    fi
    # the files that hold GPU tests, so that every part has some
    mapfile -t all < <(grep -rlE "mark\.gpu|pytestmark.*gpu" tests --include='test_*.py' | sort)
    for i in "${!all[@]}"; do (( i % n == k - 1 )) && FILES+=("${all[$i]}"); done
    if [ "${#FILES[@]}" -eq 0 ]; then
        echo "PART=$PART: no test file with GPU tests falls in this part" >&2
        exit 2
    fi
fi

failed=()
suite() {  # name; the environment is set by the caller
    local name=$1
    echo "=== $name: $(python3 -c 'import fused_swiglu; print(fused_swiglu.__file__)')" | tee -a "$OUT/suites.log"
    python3 -X faulthandler -c "$SNIPPET" 2>&1 | tee -a "$OUT/suites.log"
    python3 -m pytest -q -m gpu -p no:cacheprovider ${PYTEST_ARGS:-} ${FILES[@]+"${FILES[@]}"} 2>&1 | tee "$OUT/pytest_gpu_$name${PART:+_part${PART/\//of}}.log" | tail -n 25
    local rc=${PIPESTATUS[0]}
    echo "=== $name: pytest exit $rc; $(tail -n 1 "$OUT/pytest_gpu_$name${PART:+_part${PART/\//of}}.log")" | tee -a "$OUT/suites.log"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

SUITES="${SUITES:-source wheel}"
if [[ " $SUITES " == *" source "* ]]; then (
    export PYTHONPATH="$PWD/src:$SITE" FUSED_SWIGLU_LIBRARY="$LIBS/libfused_swiglu.so"
    export FUSED_SWIGLU_CACHE_DIR=/tmp/fsw-gpu-suites/cache-source
    suite source
    [ "${#failed[@]}" -eq 0 ]
) || failed+=(source); fi
if [[ " $SUITES " == *" wheel "* ]]; then (
    export PYTHONPATH="$WHEEL:$SITE" FUSED_SWIGLU_CACHE_DIR=/tmp/fsw-gpu-suites/cache-wheel
    suite wheel
    [ "${#failed[@]}" -eq 0 ]
) || failed+=(wheel); fi
if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed: ${failed[*]}" | tee -a "$OUT/suites.log"
    exit 1
fi
echo "suites passed: $SUITES" | tee -a "$OUT/suites.log"
