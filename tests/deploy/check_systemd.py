#!/usr/bin/env python3
"""tests/deploy/check_systemd.py - deploy/systemd/ as systemd sees it.

- `systemd-analyze verify` accepts both units with no message at all (it
  exits 0 even on unknown directives, so any output fails), with ExecStart
  pointing at the built binary (verify wants it to exist) and the man page
  the build renders on MANPATH (the units' Documentation=man:graphserve(1));
  a misspelt directive must make it speak, or the check is blind.
- `systemd-analyze security --offline=true` scores the service <= 2.0.
- The ExecStart options are real: `graphserve config print` accepts them,
  with the example config and credential files in place.
- TimeoutStopSec is longer than the drain the config allows (default and
  example), so systemd never kills a draining daemon.
"""
import os
import re
import shutil
import subprocess

from deploylib import BUILD, SRC, Checks, effective_config, example_config_copy, tmpdir

c = Checks()
analyze = shutil.which("systemd-analyze")
if not c.check(analyze is not None, "systemd-analyze is installed (Debian package 'systemd')"):
    c.finish()

tmp = tmpdir()
with open(os.path.join(SRC, "deploy", "systemd", "graphserve.service.in")) as f:
    template = f.read()
etc = os.path.join(tmp, "etc")
unit = template.replace("@BINDIR@", os.path.join(BUILD, "server")).replace("@SYSCONFDIR@", etc)
with open(os.path.join(tmp, "graphserve.service"), "w") as f:
    f.write(unit)
shutil.copy(os.path.join(SRC, "deploy", "systemd", "graphserve.socket"), tmp)
os.makedirs(os.path.join(tmp, "man", "man1"))
shutil.copy(os.path.join(BUILD, "deploy", "graphserve.1"), os.path.join(tmp, "man", "man1"))


def analyze_run(*args):
    env = dict(os.environ, MANPATH=os.path.join(tmp, "man"), SYSTEMD_COLORS="0")
    p = subprocess.run([analyze, *args], cwd=tmp, capture_output=True, text=True, env=env)
    return p.returncode, (p.stdout + p.stderr).strip()


rc, out = analyze_run("verify", "./graphserve.service", "./graphserve.socket")
c.check(rc == 0 and out == "", "systemd-analyze verify: no complaint about either unit", out)

with open(os.path.join(tmp, "typo.service"), "w") as f:
    f.write("[Service]\nExecStart=/bin/true\nProtectSytem=strict\n")
rc, out = analyze_run("verify", "--man=no", "./typo.service")
c.check("ProtectSytem" in out, "verify notices a misspelt directive (the check can fail)", out)

rc, out = analyze_run("security", "--offline=true", "--threshold=20", "./graphserve.service")
m = re.search(r"Overall exposure level for graphserve\.service: ([0-9.]+)", out)
score = float(m.group(1)) if m else None
print("systemd-analyze security --offline=true: exposure %s" % score)
c.check(rc == 0 and score is not None and score <= 2.0, "security exposure <= 2.0", out[-3000:])
for directive in ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes",
                  "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service",
                  "MemoryMax=", "LimitNOFILE=", "LoadCredential=", "Type=notify", "WatchdogSec="):
    c.check(directive in unit, "the service sets " + directive.strip())

# ExecStart, backslash continuations joined.
exec_line = re.search(r"^ExecStart=((?:.*\\\n)*.*)$", unit, re.M).group(1).replace("\\\n", " ")
argv = exec_line.split()
c.check(argv[0] == os.path.join(BUILD, "server", "graphserve") and argv[1] == "serve",
        "ExecStart runs `graphserve serve`", exec_line)
creds = {}
for m in re.finditer(r"^LoadCredential=([^:\n]+):(\S+)$", unit, re.M):
    creds[m.group(1)] = m.group(2)
os.makedirs(os.path.join(tmp, "creds"))
args = []
config_path, cfg = example_config_copy(tmp)
for a in argv[2:]:
    if a.startswith("%d/"):
        name = a[3:]
        c.check(name in creds, "ExecStart's %s comes from a LoadCredential= line" % a)
        a = os.path.join(tmp, "creds", name)
        with open(a, "w") as f:
            f.write("test-key-0123456789\n")
    elif a == os.path.join(etc, "graphserve", "graphserve.json"):
        a = config_path
    args.append(a)
eff, out = effective_config(args)
c.check(eff is not None, "graphserve accepts the unit's options: " + " ".join(argv[2:]), out)

stop = re.search(r"^TimeoutStopSec=(\d+)s?$", unit, re.M)
stop_s = int(stop.group(1)) if stop else 0
drain_default = eff["drain_timeout_s"] if eff else None
c.check(stop_s > max(cfg["drain_timeout_s"], drain_default or 0),
        "TimeoutStopSec=%ss outlasts drain_timeout_s (example %s, default %s)"
        % (stop_s, cfg["drain_timeout_s"], drain_default))
shutil.rmtree(tmp)
c.finish()
