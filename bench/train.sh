#!/bin/sh
# bench/train.sh BUILD TEXT [THREADS]: training speed and the loss curve on the seed
# configuration of issue 21 (the study graphserve's training follows: a 2-layer,
# 64-wide, 4-head model, block 32, batch 16, 1500 steps at 3e-3 on a 50,000-character
# slice), as a byte-level Llama model. TEXT is the corpus; its first 50,000 bytes are
# used (models/kjv_corpus.sh makes the King James Bible one). Prints graphserve
# train's summary: first loss next to ln(vocab), held-out loss and perplexity, the
# seconds of the 1500 steps, and tokens/s of the steps (forward + backward + update)
# and of the held-out evaluations (forward only, the same shape). The curve goes to
# $OUT/seed.csv and $OUT/seed.svg (OUT defaults to /tmp).
set -eu
build=${1:?usage: bench/train.sh BUILD TEXT [THREADS]}
text=${2:?usage: bench/train.sh BUILD TEXT [THREADS]}
threads=${3:-2}
out=${OUT:-/tmp}
head -c 50000 "$text" > "$out/seed-corpus.txt"
"$build/server/graphserve" train -i "$out/seed-corpus.txt" -o "$out/seed.gguf" \
    --n-embd 64 --n-layer 2 --n-head 4 --block 32 --batch 16 --steps 1500 --lr 3e-3 \
    --eval-every 100 --csv "$out/seed.csv" --svg "$out/seed.svg" --threads "$threads" --seed 1
