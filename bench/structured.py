#!/usr/bin/env python3
"""bench/structured.py - decode tokens/s through the daemon with and without a
JSON-schema constraint, one stream and S concurrent streams, best of N
alternated runs. One markdown row per stream count on stdout: model, streams, free t/s,
constrained t/s, their ratio, and the share of the engine's decoding time spent
on masks and matchers (timings.grammar_ms; least of the runs), which does not
swing with the machine's load as the wall-clock ratio does.

usage: bench/structured.py BUILD_DIR MODEL [S] [N]

Both sides generate exactly max_tokens tokens: the free side with ignore_eos,
the constrained side under a grammar that opens a JSON object and a string
value and never lets it close (the rules a JSON Schema's string property
compiles to, without the closing quote), so every step masks inside a JSON
string, where nearly the whole vocabulary is allowed: the most mask work per
step. Tokens/s is completion tokens over the wall time from the first request
sent to the last answer, as a client sees it.
"""
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request

build, model = sys.argv[1], sys.argv[2]
S = int(sys.argv[3]) if len(sys.argv) > 3 else 16
N = int(sys.argv[4]) if len(sys.argv) > 4 else 3
MAX_TOKENS = 128
GRAMMAR = 'root ::= "{\\"text\\": \\"" ( [^"\\\\\\x00-\\x1F] | "\\\\" ["\\\\/bfnrt] )*\n'

proc = subprocess.Popen([build + "/server/graphserve", "serve", "-m", model, "--port", "0",
                         "--backend", "cpu", "--max-seqs", str(max(S, 16))],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = None
for line in proc.stdout:
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
    if m:
        url = m.group(1)
        break
assert url, "the daemon did not start"


def one(constrained, seed, out):
    body = {"messages": [{"role": "user", "content": "Write."}], "max_tokens": MAX_TOKENS,
            "temperature": 1.0, "seed": seed}
    if constrained:
        body["grammar"] = GRAMMAR
    else:
        body["ignore_eos"] = True
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(req, timeout=3600))
    t = d["timings"]
    out.append((d["usage"]["completion_tokens"], t.get("grammar_ms", 0.0), t["predicted_ms"]))


def run(constrained, streams):
    out = []
    ts = [threading.Thread(target=one, args=(constrained, 100 + i, out)) for i in range(streams)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    tokens = [o[0] for o in out]
    # The engine thread computes every sequence's mask in turn: their sum over
    # the decoding span is the share of the engine's time spent on grammars.
    share = sum(o[1] for o in out) / max(o[2] for o in out)
    return sum(tokens) / wall, min(tokens), share


one(True, 1, [])  # the vocabulary trie is built on the first constrained request
for streams in (1, S):
    best = {False: 0.0, True: 0.0}
    shares = []
    for _ in range(N):
        for c in (False, True):
            tps, n_min, share = run(c, streams)
            assert n_min == MAX_TOKENS, "a stream ended early (%d tokens)" % n_min
            best[c] = max(best[c], tps)
            if c:
                shares.append(share)
    print("| %s | %d | %.1f | %.1f | %.1f%% | %.2f%% |" %
          (model.split("/")[-1], streams, best[False], best[True],
           100.0 * best[True] / best[False], 100.0 * min(shares)))
proc.terminate()
proc.wait()
