#!/usr/bin/env python3
"""tests/deploy/check_launchd.py - deploy/launchd/com.graphserve.plist.in,
read with Python's plistlib (the same XML plist format launchd reads; the
template's @VARS@ sit inside <string>s, so the template itself parses).

- It is a well-formed plist with the keys launchd needs, of the right types.
- KeepAlive restarts the daemon after a failure or crash, not after a clean
  exit (SuccessfulExit=false).
- ExitTimeOut (SIGTERM to SIGKILL) outlasts the drain the config allows.
- Logs go to absolute file paths; the program runs `graphserve serve` as a
  non-root user, with options that graphserve accepts.
"""
import os
import plistlib

from deploylib import BUILD, SRC, Checks, effective_config, example_config_copy, tmpdir

c = Checks()
path = os.path.join(SRC, "deploy", "launchd", "com.graphserve.plist.in")
with open(path, "rb") as f:
    try:
        pl = plistlib.load(f, fmt=plistlib.FMT_XML)
    except Exception as e:  # noqa: BLE001 - any parse error is the failure
        c.check(False, "the plist parses", repr(e))
        c.finish()
c.check(isinstance(pl, dict), "the plist parses to a dictionary")
c.check(pl.get("Label") == "com.graphserve", "Label is com.graphserve")

ka = pl.get("KeepAlive")
c.check(isinstance(ka, dict) and ka.get("SuccessfulExit") is False,
        "KeepAlive restarts only after an unsuccessful exit", repr(ka))
c.check(isinstance(ka, dict) and ka.get("Crashed") is True, "KeepAlive restarts after a crash")
c.check(pl.get("RunAtLoad") is True, "RunAtLoad starts it at boot")
c.check(isinstance(pl.get("ThrottleInterval"), int) and pl["ThrottleInterval"] >= 1,
        "ThrottleInterval spaces restarts")

for key in ("StandardOutPath", "StandardErrorPath"):
    v = pl.get(key, "")
    c.check(isinstance(v, str) and v.startswith("@LOCALSTATEDIR@/log/"), key + " is a log file", v)

c.check(pl.get("UserName") not in (None, "root"), "runs as a non-root user", repr(pl.get("UserName")))
nofile = pl.get("SoftResourceLimits", {}).get("NumberOfFiles", 0)
c.check(isinstance(nofile, int) and nofile >= 4096, "open-file limit raised", repr(nofile))

args = pl.get("ProgramArguments", [])
c.check(args[:2] == ["@BINDIR@/graphserve", "serve"], "ProgramArguments run graphserve serve",
        repr(args))
tmp = tmpdir()
config_path, cfg = example_config_copy(tmp)
keys = os.path.join(tmp, "api-keys")
with open(keys, "w") as f:
    f.write("test-key-0123456789\n")
real = [config_path if a == "@SYSCONFDIR@/graphserve/graphserve.json" else
        keys if a == "@SYSCONFDIR@/graphserve/api-keys" else a for a in args[2:]]
eff, out = effective_config(real)
c.check(eff is not None, "graphserve accepts the plist's options: " + " ".join(args[2:]), out)

exit_timeout = pl.get("ExitTimeOut")
drain = max(cfg["drain_timeout_s"], eff["drain_timeout_s"] if eff else 0)
c.check(isinstance(exit_timeout, int) and exit_timeout > drain,
        "ExitTimeOut=%r outlasts drain_timeout_s=%d" % (exit_timeout, drain))

# The installed copy (meson configure_file) is the template with paths filled in.
built = os.path.join(BUILD, "deploy", "com.graphserve.plist")
with open(built, "rb") as f:
    inst = plistlib.load(f)
c.check(inst["ProgramArguments"][0].endswith("/bin/graphserve") and "@" not in repr(inst),
        "the configured plist has every path filled in", repr(inst["ProgramArguments"]))
c.finish()
