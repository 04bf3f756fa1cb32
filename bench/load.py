#!/usr/bin/env python3
"""bench/load.py - N concurrent streaming clients against OpenAI-style servers.

Drives one or more running servers (graphserve, llama-server, anything that
streams /v1/completions) with the same load, alternating between them round by
round so that a busy machine slows each alike: --clients clients at once, each
sending --requests requests one after another, every request its own prompt
(so no two share a prefix beyond the first words), greedy, --max-tokens tokens
with the end-of-text token ignored so every server generates the same count.
Every round sends the same prompts, so a server that keeps a finished
request's whole prompt (llama-server's slots, graphserve's prefix cache) can
serve a later round from it; --fresh-prompts puts the round and a number drawn
at start into each prompt's first words, so that no prompt is ever sent twice
and each round's prompts cost a server what new ones do (in its last words, the
rest of each prompt would be the same as the previous round's, and a server
that reuses a cached prefix of any length would compute only the last few
tokens).
Time to first token is the first chunk with text, so the model's tokens must
decode to text: a `graphserve synth` file needs --vocab-from (its default
vocabulary streams nothing).

Per server and round it prints one markdown row: aggregate generated tokens/s
(all tokens over the wall time from the first request to the last answer),
time to first token p50/p99, inter-token latency p50/p99 (gaps between
consecutive streamed chunks of one answer), and the requests that failed. The
last lines are each server's best round and its ratios to the first server's.

Standard library only. Speed is a measurement, never a test: nothing here
asserts a timing.

usage: bench/load.py --server graphserve=http://127.0.0.1:8080 \\
           [--server llama=http://127.0.0.1:8081] [--clients 16] [--requests 4] \\
           [--max-tokens 64] [--rounds 2] [--model NAME] [--api-key KEY] [--fresh-prompts]
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

OPENINGS = [
    "Once upon a time there was a little girl named",
    "The old fisherman pulled his boat onto the sand and",
    "In the morning the children ran to the park because",
    "Tom found a small box under his bed. Inside it was",
    "The sun was hot and the dog wanted to",
    "Lily had a red ball that she loved more than",
    "One day a bird flew into the classroom and",
    "The king looked out of the window and saw",
]
NAMES = ["Anna", "Ben", "Sara", "Max", "Mia", "Leo", "Zoe", "Sam", "Ivy", "Tim", "Eva", "Jack",
         "Ruby", "Noah", "Ella", "Finn", "Lucy", "Owen", "Rosa", "Hugo"]


def prompt(client, request, salt=0):
    """A distinct prompt per (client, request): no two requests share a prefix past a few words.
    A nonzero salt opens the prompt with a number, so that no cached prefix of another
    salt's prompts matches past the first token."""
    a = OPENINGS[(client + request) % len(OPENINGS)]
    text = "%s %s, who was %d years old and lived in house number %d." % (
        a, NAMES[client % len(NAMES)], 3 + (client * 7 + request) % 60,
        100 + client * 13 + request)
    return "%d. %s" % (salt, text) if salt else text


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(q / 100.0 * (len(xs) - 1)))))
    return xs[k]


def one_request(url, a, text, out):
    """Streams one completion; appends (ttft s, [chunk gaps s], tokens, error) to out."""
    u = urllib.parse.urlsplit(url)
    conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    body = {"prompt": text, "max_tokens": a.max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    if a.model:
        body["model"] = a.model
    headers = {"Content-Type": "application/json"}
    if a.api_key:
        headers["Authorization"] = "Bearer " + a.api_key
    t0 = time.monotonic()
    first = None
    last = None
    gaps = []
    chunks = 0
    usage_tokens = None
    try:
        conn = conn_cls(u.hostname, u.port, timeout=a.timeout)
        conn.request("POST", (u.path.rstrip("/") or "") + "/v1/completions", json.dumps(body),
                     headers)
        resp = conn.getresponse()
        if resp.status != 200:
            out.append((None, [], 0, "status %d: %s" % (resp.status, resp.read()[:200])))
            return
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                usage_tokens = ev["usage"].get("completion_tokens")
            choices = ev.get("choices") or []
            if choices and choices[0].get("text"):
                now = time.monotonic()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                chunks += 1
        conn.close()
    except (OSError, ValueError, http.client.HTTPException) as e:
        out.append((None, [], 0, str(e)))
        return
    if first is None:
        out.append((None, [], 0, "no text streamed (the model's tokens must decode to text: "
                                 "a synth model needs --vocab-from)"))
        return
    out.append((first - t0, gaps, usage_tokens if usage_tokens is not None else chunks, None))


def run_load(url, a, salt):
    results = []
    lock = threading.Lock()

    def client(i):
        mine = []
        for j in range(a.requests):
            one_request(url, a, prompt(i, j, salt), mine)
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in results if r[3] is None]
    tokens = sum(r[2] for r in ok)
    ttft = [r[0] for r in ok]
    gaps = [g for r in ok for g in r[1]]
    errors = [r[3] for r in results if r[3] is not None]
    return {"tokens_per_s": tokens / wall if wall > 0 else 0.0, "tokens": tokens, "wall_s": wall,
            "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
            "itl_p50": percentile(gaps, 50), "itl_p99": percentile(gaps, 99),
            "failed": len(errors), "first_error": errors[0] if errors else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", required=True, metavar="NAME=URL")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=4, help="per client, one after another")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--timeout", type=float, default=600, help="per request, seconds (a hang bound)")
    ap.add_argument("--json", action="store_true", help="also print every round as JSON")
    ap.add_argument("--fresh-prompts", action="store_true",
                    help="no prompt sent twice: each round's differ from every other round's "
                         "and run's (the round and a random number in the first words)")
    a = ap.parse_args()
    servers = []
    for s in a.server:
        name, sep, url = s.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            ap.error("--server wants NAME=http://HOST:PORT, got %r" % s)
        servers.append((name, url))
    print("%d clients x %d requests, %d tokens each, greedy, ignore_eos, %s prompts" %
          (a.clients, a.requests, a.max_tokens, "fresh" if a.fresh_prompts else "repeated"))
    salt_base = random.randrange(1, 10 ** 4) * 100 if a.fresh_prompts else 0
    print("| server | round | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    best = {}
    for rnd in range(1, a.rounds + 1):
        for name, url in servers:
            # Both servers get the same prompts in a round; a fresh round's are new to both.
            r = run_load(url, a, 1000 * (salt_base + rnd) if a.fresh_prompts else 0)
            print("| %s | %d | %.1f | %.0f | %.0f | %.1f | %.1f | %d |" %
                  (name, rnd, r["tokens_per_s"], 1e3 * r["ttft_p50"], 1e3 * r["ttft_p99"],
                   1e3 * r["itl_p50"], 1e3 * r["itl_p99"], r["failed"]), flush=True)
            if r["first_error"]:
                print("  %s: first error: %s" % (name, r["first_error"]), file=sys.stderr)
            if a.json:
                print(json.dumps(dict(r, server=name, round=rnd)))
            if name not in best or r["tokens_per_s"] > best[name]["tokens_per_s"]:
                best[name] = r
    base = best[servers[0][0]]
    print()
    for name, _ in servers:
        r = best[name]
        print("%s: best %.1f tokens/s (%.2fx %s), TTFT p99 %.0f ms (%.2fx)" %
              (name, r["tokens_per_s"], r["tokens_per_s"] / base["tokens_per_s"]
               if base["tokens_per_s"] else 0, servers[0][0], 1e3 * r["ttft_p99"],
               r["ttft_p99"] / base["ttft_p99"] if base["ttft_p99"] else 0))
    return 1 if any(best[n]["failed"] for n, _ in servers) else 0


if __name__ == "__main__":
    sys.exit(main())
