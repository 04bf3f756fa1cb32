#!/usr/bin/env python3
"""tests/deploy/check_dev_run.py - the README's first command, `./dev run`, end to end.

It installs nothing here (the test run has installed everything), builds the
release build users run, takes the committed default model, prints its summary and a
tokenization, and execs the daemon: the daemon must answer /ready and a
completion on the port it prints, and exit 0 on SIGTERM. The first run builds
build-release (a minute or two on two cores); later runs reuse it.
"""
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

from deploylib import SRC, Checks, clean_env

c = Checks()
# errors="replace": the tokenization it prints shows byte-level pieces.
proc = subprocess.Popen([os.path.join(SRC, "dev"), "run", "--port", "0"], cwd=SRC,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        errors="replace", env=clean_env())
lines = []
url = None
# Every wait below is a hang guard inside meson's 900 s timeout for this test.
deadline = time.monotonic() + 850
try:
    # Everything before the daemon is the script's own output; the daemon
    # prints "graphserve: listening on URL" once its socket is bound.
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
        if time.monotonic() > deadline:
            break
    out = "\n".join(lines[-30:])
    c.check(any("trained by graphserve train" in l for l in lines),
            "the script gets past the model summary (nothing in it ends the script)", out)
    if c.check(url is not None, "the daemon prints the address it listens on", out):
        # Polled until the test's own deadline: a loaded machine may take long
        # to finish the known-answer check, and only a hang should fail here.
        ready = None
        while ready is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/ready", timeout=60) as r:
                    ready = r.status
            except urllib.error.HTTPError as e:
                ready = e.code  # answered: the check ran before "listening"
            except Exception:
                time.sleep(0.5)
        c.check(ready == 200, "/ready answers 200", str(ready))
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})
        req = urllib.request.Request(url + "/v1/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=max(60, deadline - time.monotonic())) as r:
            j = json.load(r)
        c.check(j["choices"][0]["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 4,
                "a completion of 4 tokens", json.dumps(j)[:400])
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=max(60, deadline - time.monotonic()))
    c.check(rc == 0, "SIGTERM drains the daemon and it exits 0", "exit status %d" % rc)
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
c.finish()
