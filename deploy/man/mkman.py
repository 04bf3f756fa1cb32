#!/usr/bin/env python3
"""deploy/man/mkman.py GRAPHSERVE OUT - writes the graphserve(1) man page.

The option list is rendered from the program's own `--help` texts (the
command list and `serve --help`, which config/table.c generates), so the man
page cannot drift from the binary. The surrounding sections (signals,
environment, files) are written here. A help line this script does not
recognise is an error, not a silent omission.
"""
import re
import subprocess
import sys


def run(exe, *args):
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    return subprocess.run([exe, *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def esc(text):
    """Escapes text for a troff line: backslashes, hyphens in options, and a
    leading dot or quote that troff would read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text


def commands_section(help_text):
    out = []
    for line in help_text.splitlines():
        m = re.match(r"^  ([a-z]+)\s{2,}(.+)$", line)
        if m:
            out += [".TP", ".B " + m.group(1), esc(m.group(2))]
    if not out:
        sys.exit("mkman: no commands found in `graphserve --help`")
    return out


def serve_options_section(help_text):
    lines = help_text.splitlines()
    out, para = [], []
    # The preamble up to the first option is prose.
    i = 0
    while i < len(lines) and not lines[i].startswith("  -"):
        line = lines[i]
        if line.startswith("usage:"):
            pass
        elif line.strip():
            para.append(line.strip())
        elif para:
            out += [".PP", esc(" ".join(para))]
            para = []
        i += 1
    for line in lines[i:]:
        opt = re.match(r"^  (-\S.*?)(?:\s{2,}(.*))?$", line)
        cont = re.match(r"^ {6,}(\S.*)$", line)
        head = re.match(r"^([A-Za-z][A-Za-z ]*):$", line)
        if cont and out:
            out.append(esc(cont.group(1)))
        elif opt:
            out += [".TP", "\\fB" + esc(opt.group(1)) + "\\fR"]
            if opt.group(2):
                out.append(esc(opt.group(2)))
        elif head:
            out += [".SS " + esc(head.group(1))]
        elif line.strip():
            sys.exit("mkman: unrecognised line in `serve --help`: %r" % line)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: mkman.py GRAPHSERVE OUT")
    exe, path = sys.argv[1], sys.argv[2]
    version = run(exe, "--version").split()[-1]
    page = [
        '.TH GRAPHSERVE 1 "" "graphserve %s" "User Commands"' % esc(version),
        ".SH NAME",
        "graphserve \\- LLM inference server with an OpenAI\\-compatible HTTP API",
        ".SH SYNOPSIS",
        ".B graphserve serve",
        "\\fB\\-m\\fR \\fIMODEL.gguf\\fR [\\fIoptions\\fR]",
        ".br",
        ".B graphserve",
        "\\fIcommand\\fR [\\fIoptions\\fR]",
        ".SH DESCRIPTION",
        "graphserve loads a GGUF model and serves it over HTTP with the OpenAI",
        "chat completions, completions and models endpoints, plus",
        ".BR /health ,",
        ".B /ready",
        "and",
        ".BR /metrics .",
        "Its other commands inspect, tokenize, run and benchmark models.",
        "Run",
        ".B graphserve",
        "\\fIcommand\\fR \\fB\\-\\-help\\fR for a command's own options.",
        ".SH COMMANDS",
    ]
    page += commands_section(run(exe, "--help"))
    page += [".SH SERVE OPTIONS"]
    page += serve_options_section(run(exe, "serve", "--help"))
    page += [
        ".SH SIGNALS",
        ".TP", ".B SIGTERM, SIGINT",
        "Drain: stop accepting, let in\\-flight requests finish for up to",
        "\\fB\\-\\-drain\\-timeout\\-s\\fR, then exit.",
        ".TP", ".B SIGHUP",
        "Reload the config file and API keys; options marked reload change, the",
        "others are reported as needing a restart. In\\-flight requests go on.",
        ".SH ENVIRONMENT",
        ".TP", ".B GRAPHSERVE_*",
        "Every serve option, as listed above.",
        ".TP", ".B NOTIFY_SOCKET, WATCHDOG_USEC",
        "Set by systemd for Type=notify services: graphserve reports READY=1",
        "once the model is loaded and checked, STOPPING=1 when it drains, and",
        "WATCHDOG=1 from its engine loop.",
        ".TP", ".B LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES",
        "Set by systemd socket activation: graphserve serves on the passed",
        "listening socket instead of binding its own.",
        ".SH FILES",
        ".TP", ".I /etc/graphserve/graphserve.json",
        "The config file the systemd unit passes with \\fB\\-\\-config\\fR;",
        "check one with \\fBgraphserve config check\\fR \\fIFILE\\fR.",
        ".TP", ".I graphserve.service, graphserve.socket",
        "The hardened systemd units (socket activation, credentials for keys).",
        ".SH SEE ALSO",
        ".BR systemd.exec (5),",
        ".BR systemd.socket (5),",
        ".BR launchd.plist (5)",
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(page) + "\n")


if __name__ == "__main__":
    main()
