#!/bin/sh
# bench/families.sh - one `graphserve synth` model per supported family at a
# realistic small shape, at reduced depth, measured with bench/best_of.sh's
# method: graphserve bench and llama-bench (LLAMA_BENCH) alternated on the
# same file, best tokens/s of each kept. The N rounds go over every model in
# turn (one best_of.sh run per model per round), so that the baseline and each
# family see the same spread of the machine's load. Prints markdown: per family
# and type, pp512 and tg128 for both, their ratios, and each ratio relative to
# the llama baseline's ratio of the same type (1.00: the family keeps llama's
# standing against llama.cpp).
#
# usage: LLAMA_BENCH=/path/llama-bench bench/families.sh BUILD_DIR [OUT_DIR]
#   THREADS (default 2), TYPES (default "q4_0 q8_0"), FAMILIES (default
#   "llama qwen2 qwen3 phi3 gemma2 gemma3"; gemma3n on request; llama is the baseline and is always
#   measured), N_LAYER (default 4), N (best of, default 3).
# Models are cached in OUT_DIR (default /tmp/gs-bench-families).
#
# Every family has a 32000-token vocabulary: the real Qwen (151936) and Gemma
# (256000, 262144) vocabularies would make the files large and the output
# projection the largest matmul of a short model.
set -eu
BUILD=${1:?usage: families.sh BUILD_DIR [OUT_DIR]}
OUT=${2:-/tmp/gs-bench-families}
GS="$BUILD/server/graphserve"
HERE=$(dirname "$0")
THREADS=${THREADS:-2}
TYPES=${TYPES:-"q4_0 q8_0"}
FAMILIES=${FAMILIES:-"llama qwen2 qwen3 phi3 gemma2 gemma3"}
N_LAYER=${N_LAYER:-4}
N=${N:-3}
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
mkdir -p "$OUT"

shape_args() {
    case "$1" in
    # The 1B Llama of bench/run_synth.sh (TinyLlama widths), the baseline.
    llama) echo "--arch llama --n-embd 2048 --n-head 32 --n-head-kv 8 --n-ff 8192" ;;
    # Qwen2.5-0.5B: q/k/v biases, tied.
    qwen2) echo "--arch qwen2 --n-embd 896 --n-head 14 --n-head-kv 2 --n-ff 4864 --tied" ;;
    # Qwen3-0.6B: head 128 (2048-wide q from 1024), q/k norms, tied.
    qwen3) echo "--arch qwen3 --n-embd 1024 --n-head 16 --n-head-kv 8 --head-dim 128 --n-ff 3072 --tied" ;;
    # Phi-3-mini: fused QKV and gate/up, 32 kv heads of 96, untied.
    phi3) echo "--arch phi3 --n-embd 3072 --n-head 32 --n-ff 8192" ;;
    # Gemma-2-2B: head 256, post-norms, soft-caps, GELU gate, tied.
    gemma2) echo "--arch gemma2 --n-embd 2304 --n-head 8 --n-head-kv 4 --head-dim 256 --n-ff 9216" ;;
    # Gemma-3-1B: head 256, one kv head, q/k norms, window 512, tied.
    gemma3) echo "--arch gemma3 --n-embd 1152 --n-head 4 --n-head-kv 1 --head-dim 256 --n-ff 6912 --sliding-window 512 --tied" ;;
    # Gemma-3n-E2B widths: AltUp, LAuReL, 256-wide per-layer inputs, KV sharing (from 10
    # layers on: N_LAYER=10 gives E2B's share), activation sparsity, window 512, tied.
    gemma3n) echo "--arch gemma3n --n-embd 2048 --n-head 8 --n-head-kv 2 --head-dim 256 --n-ff 8192 --sliding-window 512 --rope-base 1000000" ;;
    *) echo "unknown family $1" >&2; exit 2 ;;
    esac
}

rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "threads: $THREADS; layers: $N_LAYER; best of $N; commit: $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown); start: $(date -u +%Y-%m-%dT%H:%MZ)"
case " $FAMILIES " in *" llama "*) ;; *) FAMILIES="llama $FAMILIES" ;; esac
for type in $TYPES; do
    for fam in $FAMILIES; do
        f="$OUT/$fam-$N_LAYER-$type.gguf"
        [ -f "$f" ] || "$GS" synth -o "$f" $(shape_args "$fam") --n-layer "$N_LAYER" \
            --n-vocab 32000 --type "$type" >/dev/null 2>&1
    done
done
round=0
while [ $round -lt "$N" ]; do
    for type in $TYPES; do
        for fam in $FAMILIES; do
            f="$OUT/$fam-$N_LAYER-$type.gguf"
            mib=$(du -m "$f" | cut -f1)
            # best_of.sh prints | file | gs pp | llama pp | ratio | gs tg | llama tg | ratio |;
            # each round's figures also go to stderr, to show the spread.
            "$HERE/best_of.sh" "$BUILD" "$f" 1 "$THREADS" |
                awk -F'|' -v fam="$fam" -v type="$type" -v mib="$mib" \
                    '{ gsub(/ /, ""); print fam, type, mib, $3, $4, $6, $7 }' | tee -a "$rows" >&2
        done
    done
    round=$((round + 1))
done
echo "end: $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 - "$rows" <<'EOF'
import sys
best = {}
for l in open(sys.argv[1]):
    if not l.strip():
        continue
    fam, typ, mib, *v = l.split()
    old = best.get((fam, typ), (mib, 0, 0, 0, 0))
    best[(fam, typ)] = (mib,) + tuple(max(float(a), float(b)) for a, b in zip(old[1:], v))
rows = [(f, t) + v for (f, t), v in best.items()]
base = {r[1]: (float(r[3]) / float(r[4]), float(r[5]) / float(r[6])) for r in rows if r[0] == "llama"}
print("| family | type | MiB | pp512 graphserve | pp512 llama.cpp | pp ratio | vs llama's | "
      "tg128 graphserve | tg128 llama.cpp | tg ratio | vs llama's |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for fam, typ, mib, gp, lp, gt, lt in rows:
    gp, lp, gt, lt = map(float, (gp, lp, gt, lt))
    rp, rt = gp / lp, gt / lt
    bp, bt = base[typ]
    print("| %s | %s | %s | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2f | %.2fx | %.2f |"
          % (fam, typ, mib, gp, lp, rp, rp / bp, gt, lt, rt, rt / bt))
EOF
