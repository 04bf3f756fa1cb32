#!/usr/bin/env python3
"""bench/spec_vs_llama.py - single-stream speculative decoding through two or more servers.

Sends each prompt of bench/spec_prompts.json to every server in turn (round by round,
so that a busy machine slows each alike), one request at a time: /v1/completions,
greedy, --max-tokens tokens with the end-of-text token ignored, prompt caching off
where the server has the switch (llama-server's cache_prompt). A request's rate is
its generated tokens over its wall time, measured by this client, so each server's
prompt processing and HTTP handling count as they would for a user. Prints one
markdown row per prompt: each server's best rate over the rounds, the ratio of every
server to the first, and which servers' text differs from the first one's; where
every server reports timings.predicted_per_second (llama-server and graphserve do), a
second row gives each one's own figure for the generation alone, best over the rounds.
A server given as NAME=URL,PID (a local process) adds a third row: its generated tokens
over the CPU time the process used for them, summed over all rounds (from /proc; the
clock tick is 10 ms, so run enough rounds), which a loaded machine distorts less than
wall time. Servers
that report it (llama-server's timings.draft_n / draft_n_accepted) add what they
drafted and kept in the best round.

Start the servers first, each with the same model and thread count, e.g.
  graphserve serve -m stories260K.gguf --threads 1 --spec ngram --port 8080
  llama-server -m stories260K.gguf -t 1 -tb 1 -np 1 --spec-type ngram-simple --port 8081

Standard library only. Speed is a measurement, never a test: nothing here asserts a
timing.

usage: bench/spec_vs_llama.py --server graphserve=http://127.0.0.1:8080 \\
           --server llama=http://127.0.0.1:8081[,PID] [--rounds 5] [--max-tokens 128] \\
           [--prompts bench/spec_prompts.json]
"""
import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse


def complete(url, prompt, max_tokens, timeout):
    """One greedy completion; returns (seconds, completion tokens, text, timings)."""
    u = urllib.parse.urlsplit(url)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "cache_prompt": False})
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    dt = time.perf_counter() - t0
    conn.close()
    if resp.status != 200:
        raise RuntimeError("%s: HTTP %d: %s" % (url, resp.status, data[:200]))
    j = json.loads(data)
    return (dt, j["usage"]["completion_tokens"], j["choices"][0]["text"], j.get("timings") or {})


def cpu_seconds(pid):
    """User + system CPU time of process pid and all its threads (Linux /proc); 0 for None."""
    if pid is None:
        return 0.0
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True, metavar="NAME=URL")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__),
                                                      "spec_prompts.json"))
    ap.add_argument("--timeout", type=float, default=600, help="per request, seconds (a hang bound)")
    a = ap.parse_args()
    servers, pids = [], {}
    for spec in a.server:
        name, url = spec.split("=", 1)
        url, _, pid = url.partition(",")
        servers.append((name, url))
        if pid:
            pids[name] = int(pid)
    prompts = json.load(open(a.prompts))
    # One warm-up request each: first-request costs (page faults, thread start) are not
    # what a serving daemon pays per request.
    for _, url in servers:
        complete(url, prompts[0]["prompt"], 8, a.timeout)
    best = {}  # (prompt, server) -> (rate, tokens, text, timings)
    best_gen = {}  # (prompt, server) -> the server's own generation rate (timings), best
    cpu, cpu_tokens = {}, {}  # (prompt, server) -> CPU seconds, tokens over all rounds
    for _ in range(a.rounds):
        for p in prompts:
            for name, url in servers:
                k = (p["name"], name)
                c0 = cpu_seconds(pids.get(name))
                dt, n, text, timings = complete(url, p["prompt"], a.max_tokens, a.timeout)
                if name in pids:
                    cpu[k] = cpu.get(k, 0) + cpu_seconds(pids[name]) - c0
                    cpu_tokens[k] = cpu_tokens.get(k, 0) + n
                if k not in best or n / dt > best[k][0]:
                    best[k] = (n / dt, n, text, timings)
                gen = timings.get("predicted_per_second")
                if gen and gen > best_gen.get(k, 0):
                    best_gen[k] = gen
    names = [n for n, _ in servers]
    head = "| prompt | " + " | ".join("%s t/s" % n for n in names)
    head += "".join(" | %s / %s" % (n, names[0]) for n in names[1:]) + " | same text |"
    head += " drafted / kept |" if any(best[k][3].get("draft_n") for k in best) else ""
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for p in prompts:
        r = [best[(p["name"], n)] for n in names]
        row = "| %s | " % p["name"] + " | ".join("%.1f" % x[0] for x in r)
        row += "".join(" | %.2fx" % (x[0] / r[0][0]) for x in r[1:])
        differ = [n for n, x in zip(names, r) if x[2] != r[0][2]]
        row += " | %s |" % ("yes" if not differ else "not " + ", ".join(differ))
        if head.endswith("drafted / kept |"):
            row += " " + ", ".join("%s %s/%s" % (n, x[3].get("draft_n", "-"),
                                                 x[3].get("draft_n_accepted", "-"))
                                   for n, x in zip(names, r)) + " |"
        print(row)
        if all((p["name"], n) in best_gen for n in names):
            g = [best_gen[(p["name"], n)] for n in names]
            print("|   generation only (server timings) | " + " | ".join("%.1f" % x for x in g) +
                  "".join(" | %.2fx" % (x / g[0]) for x in g[1:]) + " | |" +
                  (" |" if head.endswith("drafted / kept |") else ""))
        if all((p["name"], n) in cpu for n in names):
            c = [cpu_tokens[(p["name"], n)] / max(cpu[(p["name"], n)], 1e-9) for n in names]
            print("|   tokens per CPU second (all rounds) | " + " | ".join("%.0f" % x for x in c) +
                  "".join(" | %.2fx" % (x / c[0]) for x in c[1:]) + " | |" +
                  (" |" if head.endswith("drafted / kept |") else ""))
        if any(x[1] != a.max_tokens for x in r):
            print("  (a server generated fewer than %d tokens)" % a.max_tokens, file=sys.stderr)


if __name__ == "__main__":
    main()
