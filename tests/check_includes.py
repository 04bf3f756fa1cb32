#!/usr/bin/env python3
"""Checks graphserve's include graph (the "include_graph" test, tests/meson.build).

Every `#include "..."` in engine/, kvcache/, scheduler/, config/, tools/ and server/
is an edge from the including file's module to the included file's module. The check
fails when
  - an edge points upward: module order is base < engine components < kvcache <
    scheduler < server, with config beside the scheduler (either may use the
    other's headers) and nothing below them including config/, and tools/ (the
    engine tools) beside server/: server's main.c lists the tools, but no tool
    includes server/ and nothing below them includes tools/;
  - a file includes another module's private header (<dir>/internal.h belongs to
    <dir>/; engine/cpu/cpu.h to engine/cpu/ and the cpu backend's files,
    engine/backend/cpu.c, cpu_ops.c and cpu_train.c; engine/cpu/avx2.h to engine/cpu/);
  - headers include each other in a cycle (within a module or across modules).
KNOWN lists edges that still break these rules while code moves (none today); each
is reported, and one that no longer exists fails the check so that the list shrinks
with the code.
Usage: check_includes.py SOURCE_ROOT
"""
import os
import re
import sys

TREES = ["engine", "kvcache", "scheduler", "config", "tools", "server"]
RANK = {"base": 0, "engine": 1, "kvcache": 2, "scheduler": 3, "config": 3, "tools": 4,
        "server": 4}
# Edges between modules of one rank that are refused all the same (includer, included).
FORBIDDEN = {("tools", "server")}
# (includer, included): edges that still break the rules while the code moves;
# empty since the cpu kernels read the public engine/quant/blocks.h.
KNOWN = set()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module(path):
    """The module a repository path belongs to: engine/<component> for the engine."""
    parts = path.split("/")
    if parts[0] != "engine":
        return parts[0]
    if len(parts) == 2:
        return "engine/" + parts[1][: -len(".h")]
    return "engine/" + parts[1]


def rank(mod):
    if mod == "engine/base":
        return RANK["base"]
    return RANK[mod.split("/")[0]]


def private_users(path):
    """Path prefixes of the files that may include path; None for a public header."""
    if os.path.basename(path) == "internal.h":
        return (os.path.dirname(path) + "/",)
    if path == "engine/cpu/cpu.h":  # the kernels' own header, and their one backend's files
        return ("engine/cpu/", "engine/backend/cpu.c", "engine/backend/cpu_ops.c",
                "engine/backend/cpu_train.c")
    if path == "engine/cpu/avx2.h":  # what the AVX2 kernel files share
        return ("engine/cpu/",)
    return None


def main():
    root = sys.argv[1]
    edges = {}
    for tree in TREES:
        for dirpath, _, names in os.walk(os.path.join(root, tree)):
            for name in names:
                if not name.endswith((".c", ".h")):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                with open(full, encoding="utf-8") as f:
                    edges[rel] = [h for h in INCLUDE.findall(f.read()) if "/" in h]
    problems, seen_known = [], set()
    for src, heads in sorted(edges.items()):
        for h in heads:
            if not os.path.exists(os.path.join(root, h)):
                continue  # a system or generated header
            why = None
            users = private_users(h)
            if users and not src.startswith(users):
                why = f"private header of {users[0].rstrip('/')}"
            elif rank(module(h)) > rank(module(src)):
                why = f"upward: {module(src)} must not use {module(h)}"
            elif (module(src).split("/")[0], module(h).split("/")[0]) in FORBIDDEN:
                why = f"{module(src)} must not use {module(h)}"
            if why is None:
                continue
            if (src, h) in KNOWN:
                seen_known.add((src, h))
                print(f"known: {src} includes {h} ({why})")
            else:
                problems.append(f"{src} includes {h}: {why}")
    for k in sorted(KNOWN - seen_known):
        problems.append(f"{k[0]} no longer includes {k[1]}: remove it from KNOWN")
    # Cycles between headers, within a module or across (a .c file is never included).
    state = {}

    def visit(node, stack):
        state[node] = 1
        for h in edges.get(node, []):
            if h not in edges:
                continue
            if state.get(h) == 1:
                problems.append("cycle: " + " -> ".join(stack[stack.index(h):] + [h]))
            elif h not in state:
                visit(h, stack + [h])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    problems = list(dict.fromkeys(problems))
    for p in problems:
        print("include check: " + p, file=sys.stderr)
    print(f"{len(edges)} files, {sum(len(v) for v in edges.values())} includes, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
