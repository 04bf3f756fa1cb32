#!/bin/sh
# bench/vs_llama.sh - the throughput table of issue 23 in one go: graphserve's
# engine and llama.cpp on the same synth files and thread count, each row's
# runs alternated (ours, theirs, ours, ...) and the best of N kept, since on a
# shared machine other work only ever slows a run down. Prints the machine's
# CPU, the instruction set graphserve's kernels use, the measured read
# bandwidth and the load, then one markdown table; ratios are ours / theirs.
#
# usage: LLAMA_BENCH=/path/llama-bench [LLAMA_BATCHED_BENCH=/path/llama-batched-bench] \
#        bench/vs_llama.sh BUILD_DIR [OUT_DIR]
#   N (default 2) runs per row and program, THREADS (default 2), DEPTH (default 4096),
#   SHAPES (default "smol 1b"), GS_CPU_ISA_MAX (e.g. avx2) forces graphserve's kernels
#   down to that instruction set and is printed with the table.
# Models are written by `graphserve synth` into OUT_DIR (default /tmp/gs-bench) when
# missing, with the shapes of bench/run_synth.sh. Nothing here builds llama.cpp.
set -eu
BUILD=${1:?usage: vs_llama.sh BUILD_DIR [OUT_DIR]}
OUT=${2:-/tmp/gs-bench}
GS="$BUILD/server/graphserve"
N=${N:-2}
T=${THREADS:-2}
D=${DEPTH:-4096}
SHAPES=${SHAPES:-"smol 1b"}
LB=${LLAMA_BENCH:-}
LBB=${LLAMA_BATCHED_BENCH:-}
mkdir -p "$OUT"

shape_args() {
    case "$1" in
    smol) echo "--n-embd 576 --n-layer 30 --n-head 9 --n-head-kv 3 --n-ff 1536 --n-vocab 49152 --tied" ;;
    1b) echo "--n-embd 2048 --n-layer 16 --n-head 32 --n-head-kv 8 --n-ff 8192 --n-vocab 32000" ;;
    *) echo "unknown shape $1" >&2; exit 2 ;;
    esac
}

model() { # shape type -> path, written when missing
    f="$OUT/$1-$2.gguf"
    if [ ! -f "$f" ]; then
        # The fallback notes (576-wide rows in q4_K_M) go to a log; a failure shows it.
        # shellcheck disable=SC2046
        "$GS" synth -o "$f" $(shape_args "$1") --type "$2" >"$OUT/synth.log" 2>&1 ||
            { cat "$OUT/synth.log" >&2; exit 1; }
    fi
    echo "$f"
}

isa() { # what kernels.c will pick: the cap if one is set, else the best the flags allow
    if [ -n "${GS_CPU_ISA_MAX:-}" ]; then
        echo "$GS_CPU_ISA_MAX (forced by GS_CPU_ISA_MAX)"
        return
    fi
    f=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    case "$f" in
    *avx512_vnni*avx512vl* | *avx512vl*avx512_vnni*) echo "avx2-vnni (AVX-512 VNNI panels)" ;;
    *" avx2 "*) echo "avx2" ;;
    *) uname -m ;;
    esac
}

max() { python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$1" "$2"; }
jget() { python3 -c "import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
row() { # label ours theirs
    python3 -c "
import sys
a, b = float(sys.argv[2]), float(sys.argv[3])
print('| %s | %.1f | %s | %s |' % (sys.argv[1], a, '%.1f' % b if b else '-', '%.2fx' % (a / b) if b else '-'))
" "$1" "$2" "$3"
}

# graphserve pp/tg at depth d (0: none) -> "pp tg"
gs_pp_tg() {
    "$GS" bench -m "$1" -t "$T" -p 512 -n 128 -d "$2" --json |
        jget '"%f %f" % (j["pp"]["tokens_per_s"], j["tg"][0]["tokens_per_s"])'
}
llama_pp_tg() {
    if [ -z "$LB" ]; then echo "0 0"; return; fi
    "$LB" -m "$1" -t "$T" -p 512 -n 128 -d "$2" -r 1 -o json 2>/dev/null |
        jget '"%f %f" % ([r["avg_ts"] for r in j if r["n_prompt"]][0], [r["avg_ts"] for r in j if r["n_gen"]][0])'
}
gs_streams() { # model S -> "one S"
    "$GS" bench -m "$1" -t "$T" -p 0 -n 64 --streams "1,$2" --json |
        jget '"%f %f" % (j["tg"][0]["tokens_per_s"], j["tg"][1]["tokens_per_s"])'
}
llama_streams() {
    if [ -z "$LBB" ]; then echo "0 0"; return; fi
    # S_TG t/s (aggregate generation) is the 8th column of its table.
    "$LBB" -m "$1" -t "$T" -c 4096 -npp 1 -ntg 64 -npl "1,$2" 2>/dev/null |
        awk -F'|' '$4 ~ /^ *[0-9]+ *$/ {gsub(/ /, "", $9); printf "%s ", $9} END {print ""}'
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
echo "graphserve kernels: $(isa)"
echo "$("$BUILD/bench/gs-bench-bandwidth" "$T" 1024)"
echo "threads $T; best of $N alternated runs; $(date -u +%Y-%m-%dT%H:%MZ); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "llama.cpp: ${LB:-not given (LLAMA_BENCH)}; batched: ${LBB:-not given (LLAMA_BATCHED_BENCH)}"
echo
echo "| workload | graphserve t/s | llama.cpp t/s | ratio |"
echo "|---|---:|---:|---:|"

for shape in $SHAPES; do
    for type in q8_0 q4_0 q4_K_M; do
        m=$(model "$shape" "$type")
        gp=0; gt=0; lp=0; lt=0; i=0
        while [ $i -lt "$N" ]; do
            set -- $(gs_pp_tg "$m" 0); gp=$(max "$gp" "$1"); gt=$(max "$gt" "$2")
            set -- $(llama_pp_tg "$m" 0); lp=$(max "$lp" "$1"); lt=$(max "$lt" "$2")
            i=$((i + 1))
        done
        row "$shape $type pp512" "$gp" "$lp"
        row "$shape $type tg128" "$gt" "$lt"
    done
done

# Many streams: the engine's aggregate against llama-batched-bench's S_TG.
for type in q8_0 q4_0; do
    m=$(model smol "$type")
    g1=0; g16=0; l1=0; l16=0; i=0
    while [ $i -lt "$N" ]; do
        set -- $(gs_streams "$m" 16); g1=$(max "$g1" "$1"); g16=$(max "$g16" "$2")
        set -- $(llama_streams "$m" 16) 0 0; l1=$(max "$l1" "$1"); l16=$(max "$l16" "$2")
        i=$((i + 1))
    done
    row "smol $type 16 streams, aggregate tg64" "$g16" "$l16"
    row "smol $type 1 stream, tg64 (for the 16/1 ratio)" "$g1" "$l1"
    python3 -c "import sys; a,b,c,d=map(float,sys.argv[1:5]); print('| smol %s 16/1 aggregate ratio | %.2fx | %s | |' % (sys.argv[5], b/a if a else 0, '%.2fx' % (d/c) if c else '-'))" "$g1" "$g16" "$l1" "$l16" "$type"
done

# Depth: prompt and generation after DEPTH tokens of context.
m=$(model smol q8_0)
gp=0; gt=0; lp=0; lt=0; i=0
while [ $i -lt "$N" ]; do
    set -- $(gs_pp_tg "$m" "$D"); gp=$(max "$gp" "$1"); gt=$(max "$gt" "$2")
    set -- $(llama_pp_tg "$m" "$D"); lp=$(max "$lp" "$1"); lt=$(max "$lt" "$2")
    i=$((i + 1))
done
row "smol q8_0 pp512 @ d$D" "$gp" "$lp"
row "smol q8_0 tg128 @ d$D" "$gt" "$lt"
echo
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg). Not in this table: the through-the-servers rows (no load-test client yet)."
