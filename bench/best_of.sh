#!/bin/sh
# bench/best_of.sh - graphserve bench and llama-bench alternated N times on one
# model, best tokens/s of each kept. On a shared machine, whatever else runs
# only ever slows a run down, so the best of several alternated runs is the
# fairest single figure for both.
#
# usage: LLAMA_BENCH=/path/llama-bench bench/best_of.sh BUILD_DIR MODEL [N] [THREADS]
set -eu
GS="${1:?usage: best_of.sh BUILD_DIR MODEL [N] [THREADS]}/server/graphserve"
M=${2:?model}
N=${3:-3}
T=${4:-2}
gp=0; gt=0; lp=0; lt=0
max() { python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$1" "$2"; }
i=0
while [ $i -lt "$N" ]; do
    j=$("$GS" bench -m "$M" -t "$T" -p 512 -n 128 --json)
    gp=$(max "$gp" "$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pp"]["tokens_per_s"])')")
    gt=$(max "$gt" "$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tg"][0]["tokens_per_s"])')")
    if [ -n "${LLAMA_BENCH:-}" ]; then
        l=$("$LLAMA_BENCH" -m "$M" -t "$T" -p 512 -n 128 -r 1 -o json 2>/dev/null)
        lp=$(max "$lp" "$(echo "$l" | python3 -c 'import json,sys; print([r["avg_ts"] for r in json.load(sys.stdin) if r["n_prompt"]][0])')")
        lt=$(max "$lt" "$(echo "$l" | python3 -c 'import json,sys; print([r["avg_ts"] for r in json.load(sys.stdin) if r["n_gen"]][0])')")
    fi
    i=$((i + 1))
done
python3 -c "
import sys
gp, gt, lp, lt = map(float, sys.argv[2:6])
r = lambda a, b: '%.2fx' % (a / b) if b else '-'
print('| %s | %.1f | %.1f | %s | %.1f | %.1f | %s |' % (sys.argv[1], gp, lp, r(gp, lp), gt, lt, r(gt, lt)))
" "$(basename "$M")" "$gp" "$gt" "$lp" "$lt"
