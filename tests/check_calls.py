#!/usr/bin/env python3
"""Checks that the files of a component call each other as a tree (the "call_graph" test).

The include graph (check_includes.py) cannot see calls: every file of a component
includes the same internal.h. This reads the compiled objects instead. A file
that refers to a symbol another file of the same group defines is an edge from
the first file to the second; the check fails when the edges of a group form a
cycle, and prints the cycle. A group is the objects of LIBRARY whose member name
starts with PREFIX (meson names the object of engine/tok/bpe.c "tok_bpe.c.o").

Usage: check_calls.py NM LIBRARY PREFIX [PREFIX...]
"""
import os
import subprocess
import sys

DEFINED = set("TDBRGSVW")  # text, data, bss, read-only, small data, weak


def symbols(nm, library):
    """{member: (defined globals, undefined)} for each object of a (thin) archive."""
    out = subprocess.run([nm, "-A", "-g", library], check=True, capture_output=True,
                         text=True).stdout
    members = {}
    for line in out.splitlines():
        # "<archive>:<member>:<value> <type> <name>"; undefined ones have no value
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        member = os.path.basename(parts[1])
        fields = parts[2].split()
        if len(fields) < 2:
            continue
        kind, name = fields[-2], fields[-1]
        defined, undefined = members.setdefault(member, (set(), set()))
        if kind == "U":
            undefined.add(name)
        elif kind in DEFINED:
            defined.add(name)
    return members


def find_cycle(edges):
    """One cycle of the graph {node: {node}} as a list of nodes, or None."""
    state = {}  # 1: on the current path, 2: done
    path = []

    def visit(n):
        state[n] = 1
        path.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    nm, library, prefixes = sys.argv[1], sys.argv[2], sys.argv[3:]
    members = symbols(nm, library)
    failed = False
    for prefix in prefixes:
        group = {m: s for m, s in members.items() if m.startswith(prefix)}
        if not group:
            print(f"call_graph: no object of {library} starts with {prefix}")
            failed = True
            continue
        owner = {}
        for m, (defined, _) in group.items():
            for name in defined:
                owner[name] = m
        edges = {m: set() for m in group}
        for m, (_, undefined) in group.items():
            for name in undefined:
                if name in owner and owner[name] != m:
                    edges[m].add(owner[name])
        name = lambda m: m[len(prefix):].removesuffix(".o")
        for m in sorted(edges):
            callees = ", ".join(name(c) for c in sorted(edges[m])) or "-"
            print(f"{prefix}: {name(m)} -> {callees}")
        cycle = find_cycle(edges)
        if cycle:
            print(f"call_graph: the {prefix}* files call each other in a cycle: " +
                  " -> ".join(name(m) for m in cycle))
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
