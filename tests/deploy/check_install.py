#!/usr/bin/env python3
"""tests/deploy/check_install.py MESON - `meson install` and what it installs.

- Installing into a scratch DESTDIR puts the binary, graphserve(1), both
  systemd units, the example config and the launchd plist in the usual
  places under the prefix, and the installed unit runs the installed binary.
- The man page is clean troff (groff -man -ww reports nothing) and lists
  every serve option of `graphserve config reference`.
- deploy/graphserve.example.json passes `graphserve config check` (with its
  model path pointed at a file that exists here).
"""
import json
import os
import re
import shutil
import subprocess
import sys

from deploylib import BUILD, Checks, graphserve, example_config_copy, tmpdir

c = Checks()
meson = sys.argv[1]
dest = tmpdir()
p = subprocess.run([meson, "install", "--no-rebuild", "--quiet", "-C", BUILD, "--destdir", dest],
                   capture_output=True, text=True)
if not c.check(p.returncode == 0, "meson install --destdir succeeds", p.stdout + p.stderr):
    c.finish()
opts = json.loads(subprocess.run([meson, "introspect", "--buildoptions", BUILD],
                                 capture_output=True, text=True, check=True).stdout)
opt = {o["name"]: o["value"] for o in opts}
prefix = opt["prefix"]


def under(*parts):
    p = os.path.join(prefix, *parts)
    return os.path.join(dest, p.lstrip("/"))


want = {
    "binary": under(opt["bindir"], "graphserve"),
    "man page": under(opt["mandir"], "man1", "graphserve.1"),
    "service unit": under("lib", "systemd", "system", "graphserve.service"),
    "socket unit": under("lib", "systemd", "system", "graphserve.socket"),
    "example config": under(opt["datadir"], "doc", "graphserve", "examples",
                            "graphserve.example.json"),
    "launchd plist": under(opt["datadir"], "doc", "graphserve", "examples",
                           "com.graphserve.plist"),
}
for what, path in want.items():
    c.check(os.path.isfile(path), "installs the %s as %s" % (what, path[len(dest):]))
c.check(os.access(want["binary"], os.X_OK), "the installed binary is executable")
with open(want["service unit"]) as f:
    unit = f.read()
m = re.search(r"^ExecStart=(\S+)", unit, re.M)
c.check(m is not None and m.group(1) == os.path.join(prefix, opt["bindir"], "graphserve"),
        "the installed unit runs the installed binary", m.group(0) if m else unit[:200])
c.check(re.search(r"@[A-Z]+@", unit) is None, "the installed unit has every @VAR@ filled in")

man = want["man page"]
groff = shutil.which("groff")
if c.check(groff is not None, "groff is installed (Debian package groff-base)"):
    p = subprocess.run([groff, "-man", "-ww", "-z", man], capture_output=True, text=True)
    c.check(p.returncode == 0 and p.stderr == "", "groff -man -ww: the man page has no warning",
            p.stderr)
    p = subprocess.run([groff, "-man", "-Tutf8", "-P-cbou", man], capture_output=True, text=True,
                       env=dict(os.environ, LC_ALL="C.UTF-8"))
    text = p.stdout.replace("\u2010", "-").replace("\u2212", "-")
    rc, ref = graphserve("config", "reference")
    flags = re.findall(r"^\| `(-[^`]+)`(?:, `(--[^`]+)`)?", ref, re.M)
    c.check(len(flags) > 20, "config reference lists the serve options (%d)" % len(flags), ref[:500])
    missing = [f[1] or f[0] for f in flags if (f[1] or f[0]) not in text]
    c.check(not missing, "the man page lists every serve option", "missing: %s" % missing)
    for section in ("NAME", "SYNOPSIS", "COMMANDS", "SERVE OPTIONS", "SIGNALS", "ENVIRONMENT"):
        c.check(re.search("^" + section + "$", text, re.M) is not None,
                "the man page has a %s section" % section)

cfg_path, _ = example_config_copy(tmpdir())
rc, out = graphserve("config", "check", cfg_path)
c.check(rc == 0, "graphserve config check accepts deploy/graphserve.example.json", out)
shutil.rmtree(dest)
c.finish()
