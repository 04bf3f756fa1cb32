#!/bin/sh
# bench/train_ratio.sh BEFORE AFTER TEXT [ROUNDS]: the training step's cost per
# token against a forward-only pass's at the same shape, for two graphserve
# binaries run alternately (BEFORE, AFTER, BEFORE, ...) so that the machine's load
# falls on both alike. Shapes: issue 21's seed (2 layers, 64 wide, 100 steps) and
# a 10M-parameter model (6 layers, 320 wide, 6 steps), 2 threads; TEXT's first
# 50,000 bytes are the corpus. Each run prints train's `cpu` line: process CPU
# seconds of the steps and of the held-out passes (every thread's, spinning at
# barriers included) and the ratio per token in CPU and in wall time. The load
# average before each run is printed beside it; compare ratios, best of ROUNDS.
set -eu
before=${1:?usage: bench/train_ratio.sh BEFORE AFTER TEXT [ROUNDS]}
after=${2:?usage: bench/train_ratio.sh BEFORE AFTER TEXT [ROUNDS]}
text=${3:?usage: bench/train_ratio.sh BEFORE AFTER TEXT [ROUNDS]}
rounds=${4:-5}
out=${OUT:-/tmp}
head -c 50000 "$text" > "$out/ratio-corpus.txt"
shape() {
    case $1 in
    seed) echo "--steps 100 --eval-every 50 --eval-batches 16" ;;
    10m) echo "--n-embd 320 --n-layer 6 --n-head 5 --steps 6 --eval-every 3 --eval-batches 4" ;;
    esac
}
for s in seed 10m; do
    i=0
    while [ "$i" -lt "$rounds" ]; do
        for bin in "$before" "$after"; do
            load=$(cut -d' ' -f1 /proc/loadavg)
            # shellcheck disable=SC2046 # the shape's flags are words
            line=$("$bin" train -i "$out/ratio-corpus.txt" -o "$out/ratio.gguf" $(shape $s) \
                --threads 2 --seed 1 2>/dev/null | grep '^cpu')
            echo "$s $(basename "$bin") load $load: $line"
        done
        i=$((i + 1))
    done
done
