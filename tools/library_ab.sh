#!/usr/bin/env bash
# Kernel times of two versions of the library in one run on one Hopper GPU (tools/library_ab.py): version A from
# a folder holding its sources (`mkdir .ab-old && git archive <commit> | tar -x -C .ab-old`), version B this checkout; each
# builds the configs the cells name into a cache of its own, then the rounds alternate A B, B A, ... and the
# summary pairs them.
#
#   OLD       the folder of version A (required; its src/ and csrc/)
#   ROUNDS    rounds (default 2)
#   CELL_SECONDS  seconds each cell's graph replays run back to back (default 0.25)
#   STEPS     comma-separated subset of build,rounds,summary (default all; a later call may continue)
#   OUT       where the results go (default ./out): ab_r<k>_<side>.json, library_ab.json, device_code_diff.txt
#   .whl/*.whl  wheels of missing Python dependencies (tools/fetch_wheels.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
OLD="${OLD:?set OLD to the folder of version A}"
OLD="$(cd "$OLD" && pwd)" || exit 2
OUT="${OUT:-$PWD/out}"
ROUNDS="${ROUNDS:-2}"
STEPS=",${STEPS:-build,rounds,summary},"
mkdir -p "$OUT"
SITE=/tmp/fsw-ab/site-packages
. tools/carried_wheels.sh && carried_wheels "$SITE" || exit 2
declare -A SRC=([old]="$OLD" [new]="$PWD")
side() {  # name, command...: the command in that version's environment
    local name=$1; shift
    PYTHONPATH="${SRC[$name]}/src:$SITE" FUSED_SWIGLU_CACHE_DIR="/tmp/fsw-ab/cache-$name" "$@"
}
if [[ "$STEPS" == *",build,"* ]]; then
    names=$(python3 tools/library_ab.py configs)
    for s in old new; do
        side "$s" env FUSED_SWIGLU_JOBS="${FUSED_SWIGLU_JOBS:-16}" python3 -m fused_swiglu.cli build $names || exit 1
    done
fi
if [[ "$STEPS" == *",rounds,"* ]]; then
    for r in $(seq 1 "$ROUNDS"); do
        order="old new"; [ $((r % 2)) -eq 0 ] && order="new old"
        for s in $order; do
            [ -f "$OUT/ab_r${r}_$s.json" ] && continue  # done by an earlier call
            side "$s" python3 tools/library_ab.py time --side "$s" --out "$OUT/ab_r${r}_$s.json" \
                --seconds "${CELL_SECONDS:-0.25}" || exit 1
        done
    done
fi
if [[ "$STEPS" == *",summary,"* ]]; then
    python3 tools/library_ab.py summary "$OUT"/ab_r*_old.json "$OUT"/ab_r*_new.json --out "$OUT/library_ab.json"
    # which configs' device code differs between the two builds (needs cuobjdump; exit 1 where any differs)
    python3 tools/device_code_diff.py /tmp/fsw-ab/cache-old /tmp/fsw-ab/cache-new $(python3 tools/library_ab.py configs) \
        > "$OUT/device_code_diff.txt" 2>&1
    tail -n 3 "$OUT/device_code_diff.txt"
fi
