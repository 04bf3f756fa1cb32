#!/bin/sh
# bench/kv_q8.sh - the q8_0 KV cache against f16 on one model: decode and
# prompt tokens/s at a context depth (graphserve bench -d), the two cache
# types alternated N times, best of each kept (on a shared machine whatever
# else runs only slows a run down), and their ratio.
#
# usage: bench/kv_q8.sh BUILD_DIR MODEL [DEPTH] [N] [THREADS]
set -eu
GS="${1:?usage: kv_q8.sh BUILD_DIR MODEL [DEPTH] [N] [THREADS]}/server/graphserve"
M=${2:?model}
D=${3:-4096}
N=${4:-5}
T=${5:-2}
best() { python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$1" "$2"; }
pp_f16=0; tg_f16=0; pp_q8=0; tg_q8=0
i=0
while [ $i -lt "$N" ]; do
    for kv in f16 q8_0; do
        j=$("$GS" bench -m "$M" -t "$T" -p 512 -n 64 -d "$D" --kv-type "$kv" --json)
        pp=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pp"]["tokens_per_s"])')
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
print('| %s | %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |' % (m, d, a, b, b / a, c, e, e / c))
" "$(basename "$M")" "$D" "$pp_f16" "$pp_q8" "$tg_f16" "$tg_q8"
