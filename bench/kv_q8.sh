#!/bin/sh
# bench/kv_q8.sh - the q8_0 KV cache against f16 on one model: decode and
# prompt tokens/s at a context depth (graphserve bench -d), the two cache
# types alternated N times, best of each kept (on a shared machine whatever
# else runs only slows a run down), and their ratio.
#
# usage: bench/kv_q8.sh BUILD_DIR MODEL [DEPTH] [N] [THREADS] [PROMPT]
# PROMPT (default 512) tokens in the prompt test; 0 skips it (its columns read 0).
set -eu
GS="${1:?usage: kv_q8.sh BUILD_DIR MODEL [DEPTH] [N] [THREADS]}/server/graphserve"
M=${2:?model}
D=${3:-4096}
N=${4:-5}
T=${5:-2}
P=${6:-512}
best() { python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$1" "$2"; }
pp_f16=0; tg_f16=0; pp_q8=0; tg_q8=0
i=0
while [ $i -lt "$N" ]; do
    for kv in f16 q8_0; do
        j=$("$GS" bench -m "$M" -t "$T" -p "$P" -n 64 -d "$D" --kv-type "$kv" --json)
        pp=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("pp", {}).get("tokens_per_s", 0))')
        tg=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tg"][0]["tokens_per_s"])')
        if [ "$kv" = f16 ]; then
            pp_f16=$(best "$pp_f16" "$pp"); tg_f16=$(best "$tg_f16" "$tg")
        else
            pp_q8=$(best "$pp_q8" "$pp"); tg_q8=$(best "$tg_q8" "$tg")
        fi
    done
    i=$((i + 1))
done
python3 -c "
import sys
m, d, a, b, c, e = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:7])
r = lambda x, y: '%.2fx' % (y / x) if x else '-'
print('| %s | %s | %.1f | %.1f | %s | %.1f | %.1f | %s |' % (m, d, a, b, r(a, b), c, e, r(c, e)))
" "$(basename "$M")" "$D" "$pp_f16" "$pp_q8" "$tg_f16" "$tg_q8"
