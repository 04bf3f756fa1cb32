#!/bin/sh
# bench/streams.sh - aggregate generation tokens/s of one sequence and of S
# sequences decoding together (one token each per step), best of N alternated
# runs: graphserve's engine (`graphserve bench --streams`) and, when
# LLAMA_BATCHED_BENCH names llama.cpp's llama-batched-bench, llama.cpp on the
# same file and thread count. One markdown row on stdout.
#
# usage: [LLAMA_BATCHED_BENCH=/path] bench/streams.sh BUILD_DIR MODEL [S] [N] [THREADS]
set -eu
GS="${1:?usage: streams.sh BUILD_DIR MODEL [S] [N] [THREADS]}/server/graphserve"
M=${2:?model}
S=${3:-16}
N=${4:-3}
T=${5:-2}
G=64
g1=0; gs=0; l1=0; ls=0
max() { python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$1" "$2"; }
i=0
while [ $i -lt "$N" ]; do
    j=$("$GS" bench -m "$M" -t "$T" -p 0 -n $G --streams "1,$S" --json)
    g1=$(max "$g1" "$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tg"][0]["tokens_per_s"])')")
    gs=$(max "$gs" "$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tg"][1]["tokens_per_s"])')")
    if [ -n "${LLAMA_BATCHED_BENCH:-}" ]; then
        # S_TG t/s (aggregate generation) is the 8th column of its table.
        l=$("$LLAMA_BATCHED_BENCH" -m "$M" -t "$T" -c 4096 -npp 1 -ntg $G -npl "1,$S" 2>/dev/null |
            awk -F'|' '$4 ~ /^ *[0-9]+ *$/ {gsub(/ /, "", $9); print $9}')
        l1=$(max "$l1" "$(echo "$l" | sed -n 1p)")
        ls=$(max "$ls" "$(echo "$l" | sed -n 2p)")
    fi
    i=$((i + 1))
done
python3 -c "
import sys
m, s = sys.argv[1], sys.argv[2]
g1, gs, l1, ls = map(float, sys.argv[3:7])
r = lambda a, b: '%.2fx' % (a / b) if b else '-'
print('| %s | %s | %.1f | %.1f | %s | %.1f | %.1f | %s | %s |' % (m, s, g1, gs, r(gs, g1), l1, ls, r(ls, l1), r(gs, ls)))
" "$(basename "$M")" "$S" "$g1" "$gs" "$l1" "$ls"
