#!/usr/bin/env bash
# Run the GPU test suite, the accuracy table and the benchmark on a Hopper machine whose python3
# already has torch and pytest (with pytest-timeout), without internet.
#
#   .whl/*.whl            wheels of missing Python dependencies (tools/fetch_wheels.sh), installed
#                         into /tmp/fsw-wheels/site-packages; fused_swiglu itself runs from ./src
#   FUSED_SWIGLU_LIBRARY  a prebuilt libfused_swiglu.so to use (else the build stage compiles one
#                         with the machine's nvcc and copies it to $OUT/lib/)
#   OUT                   where logs and results go (default ./out)
#   FSW_STAGES            comma-separated subset of build,info,test,accuracy,bench,host,e2e,moe,families
#                         (default: build,info,test,accuracy,bench); families: `tune --families`, its
#                         tuned files written to $OUT/tuning (FAMILIES_ARGS: e.g. "fp8 --models 7B");
#                         moe: `bench moe` (MOE_ARGS: e.g. "--models Mixtral-8x7B --tokens 1024 4096")
#   PYTEST_ARGS           extra pytest arguments (e.g. "-k qwen" or "-m 'gpu and not slow'")
#   BENCH_ARGS            extra `bench` arguments (e.g. "--models 7B --tokens 2048,8192")
#   ACCURACY_ARGS         extra `accuracy` arguments (e.g. "--dtype fp16")
#   E2E_ARGS              extra `bench e2e` arguments (e.g. "--quick")
#   FUSED_SWIGLU_LIBRARY  with libfused_swiglu_torch.so beside it, the operator library is used as is
#   CACHE_TAR             a build cache from an earlier run (default .fsw-carry/cache.tar.xz, used where it
#                         exists), unpacked into FUSED_SWIGLU_CACHE_DIR (default /tmp/fsw-cache) first; the
#                         build stage leaves the cache it used in $OUT/cache.tar.xz. Any machine's cache of these
#                         sources serves where its nvcc --version text is this machine's (the key: sources, flags,
#                         that text, nvidia-cutlass, the ABI): a CPU machine's `fused-swiglu build` makes one that saves the build here
#   PEERS                 a folder holding quack-kernels and its dependencies unpacked as site-packages/ (the
#                         peers bundle; default /tmp/keep, used where it exists), for the benchmark's peers
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-$PWD/out}"
STAGES=",${FSW_STAGES:-build,info,test,accuracy,bench},"
mkdir -p "$OUT"

# A folder named site-packages: quack-kernels fingerprints the code its epilogue calls and takes only
# modules under a site-packages (or dist-packages) folder as library code; elsewhere its first call
# fails on nvidia-cutlass-dsl's module state.
SITE=/tmp/fsw-wheels/site-packages
. tools/carried_wheels.sh && carried_wheels "$SITE" || exit 2
# ./src first, so a fused_swiglu wheel in .whl/ can never shadow the checked-out sources
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
# nvidia-cutlass-dsl (quack's compiler) puts its packages on sys.path with a .pth file, which a
# --target install does not run
if [ -d "$SITE/nvidia_cutlass_dsl/dsl_packages" ]; then
    export PYTHONPATH="$PYTHONPATH:$SITE/nvidia_cutlass_dsl/dsl_packages"
fi

PEERS="${PEERS:-/tmp/keep}"
if [ -d "$PEERS/site-packages" ]; then
    export PYTHONPATH="$PYTHONPATH:$PEERS/site-packages:$PEERS/site-packages/nvidia_cutlass_dsl/dsl_packages"
fi
export FUSED_SWIGLU_CACHE_DIR="${FUSED_SWIGLU_CACHE_DIR:-/tmp/fsw-cache}"
mkdir -p "$FUSED_SWIGLU_CACHE_DIR"
CACHE_TAR="${CACHE_TAR:-.fsw-carry/cache.tar.xz}"
[ -f "$CACHE_TAR" ] && tar -xJf "$CACHE_TAR" -C "$FUSED_SWIGLU_CACHE_DIR"

failed=()
stage() { [[ "$STAGES" == *",$1,"* ]]; }
run_stage() {  # name, command...
    local name=$1; shift
    echo "=== $name: $*" | tee -a "$OUT/stages.log"
    local start=$SECONDS
    "$@"
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$OUT/stages.log"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

if stage build; then
    if [ -n "${FUSED_SWIGLU_LIBRARY:-}" ]; then
        echo "using prebuilt library $FUSED_SWIGLU_LIBRARY" | tee -a "$OUT/stages.log"
    else
        run_stage build bash -o pipefail -c "python3 -m fused_swiglu.cli build 2>&1 | tee '$OUT/build.log'"
        lib=$(tail -n 200 "$OUT/build.log" | grep -m1 '^/.*libfused_swiglu\.so$' || true)
        if [ -n "$lib" ] && [ -f "$lib" ]; then
            mkdir -p "$OUT/lib" && cp "$lib" "$(dirname "$lib")/build.json" "$OUT/lib/"
        fi
        tar -cJf "$OUT/cache.tar.xz" --exclude='./tuning' --exclude='*.lock' -C "$FUSED_SWIGLU_CACHE_DIR" . \
            && ls -la "$OUT/cache.tar.xz"  # the builds alone: no tuned data or locks travel with them
    fi
fi
stage info && run_stage info bash -o pipefail -c "python3 -m fused_swiglu.cli info 2>&1 | tee '$OUT/info.txt'"
stage test && run_stage test bash -o pipefail -c \
    "python3 -m pytest -q -m gpu -x --timeout 900 ${PYTEST_ARGS:-} 2>&1 | tee '$OUT/pytest_gpu.log'"
cli_stage() {  # stage name, the fused-swiglu arguments (one string); its output also in $OUT/<name>.log
    stage "$1" && run_stage "$1" bash -o pipefail -c "python3 -m fused_swiglu.cli $2 2>&1 | tee '$OUT/$1.log'"
}
cli_stage accuracy "accuracy --out '$OUT/accuracy.json' ${ACCURACY_ARGS:-}"
cli_stage bench "bench --out '$OUT/bench.json' ${BENCH_ARGS:-}"
cli_stage host "bench host-time --out '$OUT/host_time.json'"
cli_stage e2e "bench e2e --out '$OUT/e2e.json' ${E2E_ARGS:-}"
cli_stage moe "bench moe --out '$OUT/moe.json' ${MOE_ARGS:-}"
cli_stage families "tune --out-dir '$OUT/tuning' --families ${FAMILIES_ARGS:-}"

if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed stages: ${failed[*]}" | tee -a "$OUT/stages.log"
    exit 1
fi
echo "all stages passed" | tee -a "$OUT/stages.log"
