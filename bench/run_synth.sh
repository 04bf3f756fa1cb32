#!/bin/sh
# bench/run_synth.sh - writes the benchmark models with `graphserve synth` and
# runs `graphserve bench` on each, for the cpu backend and (with fewer tokens,
# it is scalar) the ref backend; with LLAMA_BENCH set to a llama-bench binary,
# llama.cpp on the same files and thread count in the same run.
#
# usage: bench/run_synth.sh BUILD_DIR [OUT_DIR]
#   THREADS (default 2), TYPES (default "q4_0 q8_0 q4_K_M"), SHAPES (default
#   "smol 1b"), STREAMS (default 1,8,16,32 on smol, 1,16 on 1b), REF=0 skips ref.
# Models are cached in OUT_DIR (default /tmp/gs-bench); results go to stdout
# as markdown, ready for bench/RESULTS.md.
set -eu
BUILD=${1:?usage: run_synth.sh BUILD_DIR [OUT_DIR]}
OUT=${2:-/tmp/gs-bench}
GS="$BUILD/server/graphserve"
THREADS=${THREADS:-2}
TYPES=${TYPES:-"q4_0 q8_0 q4_K_M"}
SHAPES=${SHAPES:-"smol 1b"}
STREAMS=${STREAMS:-}
REF=${REF:-1}
mkdir -p "$OUT"

shape_args() {
    case "$1" in
    # SmolLM2-135M: tied embeddings.
    smol) echo "--n-embd 576 --n-layer 30 --n-head 9 --n-head-kv 3 --n-ff 1536 --n-vocab 49152 --tied" ;;
    # A 1B Llama (TinyLlama-like widths, Llama-3.2-1B depth).
    1b) echo "--n-embd 2048 --n-layer 16 --n-head 32 --n-head-kv 8 --n-ff 8192 --n-vocab 32000" ;;
    *) echo "unknown shape $1" >&2; exit 2 ;;
    esac
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "threads: $THREADS; date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| model | type | MiB | backend | pp512 t/s | tg128 t/s | streams: aggregate tg t/s | peak RSS MiB | KV MiB |"
echo "|---|---|---:|---|---:|---:|---|---:|---:|"
for shape in $SHAPES; do
    for type in $TYPES; do
        f="$OUT/$shape-$type.gguf"
        [ -f "$f" ] || "$GS" synth -o "$f" $(shape_args "$shape") --type "$type" >/dev/null
        mib=$(du -m "$f" | cut -f1)
        streams=$STREAMS
        [ -n "$streams" ] || { [ "$shape" = smol ] && streams=1,8,16,32 || streams=1,16; }
        j=$("$GS" bench -m "$f" -t "$THREADS" -p 512 -n 128 -r "${REPS:-2}" --streams "$streams" --json)
        echo "$j" | python3 -c '
import json, sys
j = json.load(sys.stdin)
tg = {t["streams"]: t["tokens_per_s"] for t in j["tg"]}
streams = ", ".join("%d: %.1f" % (s, v) for s, v in sorted(tg.items()))
print("| %s | %s | %s | cpu | %.1f | %.2f | %s | %.0f | %.0f |" % (sys.argv[1], sys.argv[2], sys.argv[3],
      j["pp"]["tokens_per_s"], tg.get(1, 0), streams, j["peak_rss_mib"], j["kv_mib"]))
' "$shape" "$type" "$mib"
        if [ "$REF" = 1 ]; then
            # ref is scalar and slow: fewer tokens, same measure (tokens/s).
            j=$("$GS" bench -m "$f" --backend ref -p 16 -n 4 --json)
            echo "$j" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("| %s | %s | %s | ref (pp16, tg4) | %.2f | %.3f | | %.0f | |" % (sys.argv[1], sys.argv[2], sys.argv[3],
      j["pp"]["tokens_per_s"], j["tg"][0]["tokens_per_s"], j["peak_rss_mib"]))
' "$shape" "$type" "$mib"
        fi
        if [ -n "${LLAMA_BENCH:-}" ]; then
            "$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 512 -n 128 -r 2 -o md 2>/dev/null |
                grep -E '^\| ' | tail -n +3 | sed "s/^/| $shape | $type | $mib | llama.cpp: /"
        fi
    done
done
