#!/bin/sh
# bench/spec_chain.sh BUILD [OUT]: speculative decoding where drafts can be right, on a
# model large enough to be bound by reading its weights. `graphserve synth --chain`
# writes the 1B Llama shape of bench/run_synth.sh whose greedy output is a fixed cycle
# through the printable ASCII bytes (tools/synth.c), and a 128-wide, 2-layer draft with
# the same cycle; the prompts hold the cycle as a passage to repeat, or only its first
# bytes, so that the n-gram drafter finds its drafts in the prompt, or in the answer
# after one period (95 tokens). Then gs-bench-spec with each drafter: plain and
# speculative runs alternated, best of REPS (default 5), GEN tokens (default 128),
# THREADS (default 2), TYPE the target's weights (default q4_0). The drafts are right by
# construction, so this measures what speculation gives at the memory wall when they
# are, not how often a real model's drafts are. Files go to OUT (default
# /tmp/gs-spec-chain). The prompts are bench/spec_chain_prompts.json (also for
# bench/spec_vs_llama.py --prompts); they are written again from the draft's output
# and compared with it, so the committed set is the one these models continue.
set -eu
build=${1:?usage: bench/spec_chain.sh BUILD [OUT]}
out=${2:-/tmp/gs-spec-chain}
reps=${REPS:-5}
gen=${GEN:-128}
threads=${THREADS:-2}
type=${TYPE:-q4_0}
gs="$build/server/graphserve"
mkdir -p "$out"
target="$out/chain-1b-$type.gguf"
draft="$out/chain-draft.gguf"
[ -f "$target" ] || "$gs" synth -o "$target" --chain --n-embd 2048 --n-layer 16 --n-head 32 \
    --n-head-kv 8 --n-ff 8192 --n-ctx 4096 --type "$type" 2>"$out/synth.log"
[ -f "$draft" ] || "$gs" synth -o "$draft" --chain --n-embd 128 --n-layer 2 --n-head 4 \
    --n-ctx 4096 --type q8_0 2>>"$out/synth.log"
# Two periods of the cycle, read off the draft (the same cycle as the target's).
passage=$("$gs" run -m "$draft" -p x -n 190 2>/dev/null)
python3 - "$passage" "$out/chain_prompts.json" <<'EOF'
import json, sys
p = sys.argv[1]
json.dump([
    {"name": "repeat-passage",
     "prompt": "Repeat the passage below exactly.\n\n" + p + "\n\nThe passage again:\n\n" + p[:24]},
    {"name": "continue-own", "prompt": p[:12]},
], open(sys.argv[2], "w"), indent=1)
EOF
here=$(dirname "$0")
cmp -s "$out/chain_prompts.json" "$here/spec_chain_prompts.json" ||
    { echo "spec_chain: $here/spec_chain_prompts.json is not what the --chain models continue" >&2; exit 1; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs;" \
     "$(date -u +%Y-%m-%dT%H:%MZ); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "target $target, draft $draft"
echo
echo "ngram drafter:"
"$build/bench/gs-bench-spec" -m "$target" --prompts "$here/spec_chain_prompts.json" --gen "$gen" \
    --reps "$reps" --threads "$threads"
echo
echo "draft model:"
"$build/bench/gs-bench-spec" -m "$target" --draft-model "$draft" \
    --prompts "$here/spec_chain_prompts.json" --gen "$gen" --reps "$reps" --threads "$threads"
echo
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
