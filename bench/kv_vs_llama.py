#!/usr/bin/env python3
"""bench/kv_vs_llama.py - graphserve's q8_0 KV cache beside llama.cpp's q8_0 and q4_0 caches.

Every golden of ../shared/golden/completions and ../shared/golden/arch, teacher-forced
(its prompt and completion, all but the last token, as one batch with logits on every
row) through llama.cpp with K and V cached as f16 (flash attention off, the goldens'
setting, and on), q8_0 and q4_0 (flash attention on, which llama.cpp needs for a
quantized V), each scored against the golden with tests/engine/test_kv_q8.c's metrics:
the lowest Pearson over the prompt rows, the steps whose argmax is the golden's token,
and the misses where the golden's margin to its second token was >= 0.5 (confident).
graphserve's own figures are the kv_q8 suite's log (BUILD_DIR/tests/test_kv_q8
--verbose, both backends), and a last column compares graphserve's q8_0 cache with
llama.cpp's directly (`graphserve validate --golden` over llama.cpp's q8_0 logits of
every position, written in golden form). Prints a summary over the goldens llama.cpp
can cache in q8_0 and one markdown row per golden ("x": over the thresholds; "refused":
llama.cpp would not create the cache, e.g. a head size that is not a multiple of 32).

llama.cpp is reached through a small libllama program whose path KVDUMP gives, not part
of this repository: `KVDUMP MODEL TOKENS KV FA OUT` reads whitespace-separated token ids
from the file TOKENS, decodes them in one llama_decode batch (all logits on, n_ctx and
n_batch at least the token count, 2 threads) with type_k = type_v = KV (f16, q8_0 or
q4_0) and flash attention on when FA is 1, and writes the logits as raw float32,
[n_tokens][n_vocab]; it exits non-zero with a message when the context cannot be made.

Standard library only; slow-ish (a few minutes: 4 llama.cpp runs per golden).

usage: KVDUMP=/path/kvdump bench/kv_vs_llama.py BUILD_DIR [SHARED_DIR] [OUT_DIR]
"""
import array
import json
import math
import os
import re
import subprocess
import sys

CONFIGS = [("f16", 0), ("f16", 1), ("q8_0", 1), ("q4_0", 1)]
LABELS = ["llama.cpp f16, FA off", "llama.cpp f16, FA on", "llama.cpp q8_0", "llama.cpp q4_0"]


def pearson(a, b):
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    sab = saa = sbb = 0.0
    for x, y in zip(a, b):
        x -= ma
        y -= mb
        sab += x * y
        saa += x * x
        sbb += y * y
    return sab / math.sqrt(saa * sbb)


def score(g, rows):
    """test_kv_q8.c's figures for logits rows (one per token) against golden g."""
    npr = len(g["prompt_tokens"])
    rho = min(pearson(rows[t], g["prompt_logits"][t]) for t in range(npr))
    agree = bad = 0
    for i, st in enumerate(g["steps"]):
        r = rows[npr - 1 + i]
        got = max(range(len(r)), key=r.__getitem__)  # first of equal maxima, as llama_argmax
        agree += got == st["token"]
        bad += got != st["token"] and st["margin_to_2nd"] >= 0.5
    return {"rho": rho, "agree": agree, "n": len(g["steps"]), "bad": bad}


def holds(s):
    return s["rho"] >= 0.999 and s["bad"] == 0 and s["agree"] >= 0.95 * s["n"]


def cell(s):
    if s is None:
        return "refused"
    return "%.5f %d/%d %d%s" % (s["rho"], s["agree"], s["n"], s["bad"], "" if holds(s) else " x")


def main():
    if len(sys.argv) < 2 or not os.environ.get("KVDUMP"):
        sys.exit(__doc__.split("\n\n")[-1])
    build = sys.argv[1]
    shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__),
                                                                 "..", "..", "shared")
    out = sys.argv[3] if len(sys.argv) > 3 else "/tmp/gs-kv-vs-llama"
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, GS_SHARED_DIR=shared, GS_BUILD_DIR=build)
    log = subprocess.run([os.path.join(build, "tests", "test_kv_q8"), "--verbose"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    pat = re.compile(r"(\S+)\.json (cpu|ref): pearson \S+ \S+ q8_0 (\S+), top-1 \S+ \d+/\d+ "
                     r"q8_0 (\d+)/(\d+), confident misses q8_0 (\d+)")
    ours = {(m[1], m[2]): {"rho": float(m[3]), "agree": int(m[4]), "n": int(m[5]), "bad": int(m[6])}
            for m in pat.finditer(log)}
    rows_md, sums = [], {}
    for gdir, mdir in (("golden/completions", "models"), ("golden/arch", "models/arch")):
        for fn in sorted(os.listdir(os.path.join(shared, gdir))):
            if not fn.endswith(".json"):
                continue
            stem = fn[:-5]
            g = json.load(open(os.path.join(shared, gdir, fn)))
            model = os.path.join(shared, mdir, g["model"])
            toks = g["prompt_tokens"] + g["completion_tokens"][:-1]
            tf = os.path.join(out, stem + ".tok")
            with open(tf, "w") as f:
                f.write(" ".join(map(str, toks)))
            nv = g["n_vocab"]
            got, vs = [], "-"
            for kv, fa in CONFIGS:
                o = os.path.join(out, "%s.%s.fa%d.f32" % (stem, kv, fa))
                r = subprocess.run([os.environ["KVDUMP"], model, tf, kv, str(fa), o],
                                   capture_output=True, text=True)
                if r.returncode:
                    got.append(None)
                    continue
                flat = array.array("f")
                with open(o, "rb") as f:
                    flat.frombytes(f.read())
                rows = [flat[i * nv:(i + 1) * nv] for i in range(len(toks))]
                got.append(score(g, rows))
                if kv == "q8_0":
                    lg = {"model": g["model"], "prompt": g["prompt"], "n_vocab": nv,
                          "bos_id": g["bos_id"], "eos_id": g["eos_id"], "add_bos": g["add_bos"],
                          "stopped_eog": False, "settings": {"kv_cache_type": "q8_0"},
                          "prompt_tokens": toks, "prompt_logits": [list(x) for x in rows],
                          "last_logits": list(rows[-1]), "n_predict": 0, "n_generated": 0,
                          "completion_tokens": [], "steps": []}
                    lp = os.path.join(out, stem + ".llama-q8_0.json")
                    with open(lp, "w") as f:
                        json.dump(lg, f)
                    v = subprocess.run([os.path.join(build, "server", "graphserve"), "validate",
                                        "-m", model, "--golden", lp, "--kv", "q8_0", "--backend",
                                        "cpu", "--json"], capture_output=True, text=True)
                    rep = json.loads(v.stdout)["results"][0]["report"]
                    vs = "%.5f %d/%d" % (rep["min_pearson"], rep["n_top1_match"],
                                         rep["n_positions"])
            oc, orf = ours.get((stem, "cpu")), ours.get((stem, "ref"))
            rows_md.append("| %s | %s | %s | %s | %s |" % (stem.replace("__", " "), cell(oc),
                                                       cell(orf), " | ".join(map(cell, got)), vs))
            if got[2] is not None and oc and orf:
                for name, s in zip(["graphserve q8_0, cpu", "graphserve q8_0, ref"] + LABELS,
                                   [oc, orf] + got):
                    t = sums.setdefault(name, [0, 0, 0, 0, 0, 1.0])
                    t[0] += holds(s)
                    t[1] += s["agree"]
                    t[2] += s["n"]
                    t[3] += s["bad"]
                    t[4] += 1
                    t[5] = min(t[5], s["rho"])
    print("| on the goldens llama.cpp can cache in q8_0 | within the thresholds | top-1 over all "
          "steps | confident misses | lowest min Pearson |")
    print("|---|---:|---:|---:|---:|")
    for name, t in sums.items():
        print("| %s | %d of %d | %d / %d | %d | %.5f |" % (name, t[0], t[4], t[1], t[2], t[3], t[5]))
    print()
    print("| golden | graphserve q8_0, cpu | graphserve q8_0, ref | " + " | ".join(LABELS) +
          " | graphserve q8_0 (cpu) vs llama.cpp q8_0 |")
    print("|---" * 8 + "|")
    print("\n".join(rows_md))


if __name__ == "__main__":
    main()
