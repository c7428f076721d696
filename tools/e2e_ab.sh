#!/usr/bin/env bash
# Stock against patched whole models (or another pair of VARIANTS) on a Hopper machine without internet,
# in alternating rounds (`fused-swiglu bench e2e-ab`), after the GPU tests of the model patch.
#
#   .whl/*.whl          wheels of missing Python dependencies (tools/fetch_wheels.sh)
#   .fsw-carry/cache.tar.xz   optional: a build cache from an earlier run (what this script leaves in $OUT)
#   CONFIGS             kernel configs to build first, 16 at once (default: the dual kernel's bf16 configs and
#                       the training configs a patched block runs under autograd)
#   MODELS, MODES       for bench e2e-ab (default: Qwen2.5-0.5B Qwen3-1.7B Llama-3-8B; compiled_decode)
#   VARIANTS            for bench e2e-ab: the two variants timed, A B (default: stock patched; e.g. "backend patched")
#   ROUNDS, REPEATS     for bench e2e-ab (default 10, 5)
#   AB_ARGS             other bench e2e-ab arguments (e.g. "--one-process --train-len 2048" with MODES=training)
#   PYTEST_ARGS         the tests to run first (default: the patch's tests; "" skips them)
#   AB_OUT              file name of the result under $OUT (default e2e_ab.json)
#   OUT                 where logs, results and the cache tarball go (default ./out)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
SITE=/tmp/fsw-e2e-ab/site-packages
mkdir -p "$SITE"
. tools/carried_wheels.sh && carried_wheels "$SITE" || exit 2
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export FUSED_SWIGLU_CACHE_DIR=/tmp/fsw-e2e-ab/cache FUSED_SWIGLU_JOBS="${FUSED_SWIGLU_JOBS:-16}"
mkdir -p "$FUSED_SWIGLU_CACHE_DIR"
[ -f .fsw-carry/cache.tar.xz ] && tar -xJf .fsw-carry/cache.tar.xz -C "$FUSED_SWIGLU_CACHE_DIR"

DUAL_BF16="dual_store_pingpong_128x128x64_1x1_bf16 dual_store_pingpong_128x128x64_2x1_bf16 dswiglu_pingpong_128x128x64_1x1_bf16
dual_pingpong_128x128x64_1x1_bf16 dual_pingpong_128x128x64_1x2_bf16 dual_pingpong_128x128x64_2x1_bf16
dual_pingpong_128x160x64_1x1_bf16 dual_pingpong_128x160x64_2x1_bf16 dual_pingpong_128x96x64_1x1_bf16
dual_pingpong_64x128x64_1x1_bf16 dual_pingpong_64x192x64_1x1_bf16 dual_pingpong_64x64x64_1x1_bf16
dual_swapab_pingpong_128x112x64_1x1_bf16 dual_swapab_pingpong_128x16x64_1x1_bf16"
echo "=== $(nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader); $(nvcc --version | tail -1)"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
start=$SECONDS
# shellcheck disable=SC2086
python3 -m fused_swiglu.cli build ${CONFIGS:-$DUAL_BF16} > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 3; }
echo "=== build: $((SECONDS - start)) s"
(cd "$FUSED_SWIGLU_CACHE_DIR" && tar -cJf "$OUT/cache.tar.xz" --exclude='*.lock' --exclude='./.*' .)

status=0
tests=(-m gpu tests/patch/test_patch_dense.py tests/patch/test_patch_dense_traced.py
       --deselect "tests/patch/test_patch_dense.py::test_qwen_sized_block_on_the_gpu[packed]")
# shellcheck disable=SC2206
[ -n "${PYTEST_ARGS+set}" ] && tests=(${PYTEST_ARGS})
if [ "${#tests[@]}" -gt 0 ]; then
    start=$SECONDS
    python3 -m pytest -q -p no:cacheprovider "${tests[@]}" > "$OUT/pytest.log" 2>&1 || status=4
    tail -5 "$OUT/pytest.log"
    echo "=== tests: $((SECONDS - start)) s"
fi
start=$SECONDS
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 python3 -m fused_swiglu.cli bench e2e-ab --models ${MODELS:-Qwen2.5-0.5B Qwen3-1.7B Llama-3-8B} \
    --modes ${MODES:-compiled_decode} --variants ${VARIANTS:-stock patched} \
    --rounds "${ROUNDS:-10}" --repeats "${REPEATS:-5}" ${AB_ARGS:-} \
    --out "$OUT/${AB_OUT:-e2e_ab.json}" 2>&1 | grep -v "Warning\|warn(" || status=5
echo "=== e2e_ab: $((SECONDS - start)) s"
exit $status
