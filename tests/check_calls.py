#!/usr/bin/env python3
"""Checks graphserve's call graph (the "call_graph" test, tests/meson.build).

The include graph (check_includes.py) says which headers a file reads; this says which
files a file really calls. For every static library built from the module trees, `nm`
lists each member object's global definitions and its undefined symbols; a file that
uses a symbol another file defines has an edge to it (a call, or a reference to a
table or variable). Files are named by their sources through compile_commands.json.
The check fails when
  - an edge points upward between modules (the order of check_includes.py: base <
    engine components < kvcache < scheduler < server, config beside the scheduler);
  - files of one module call each other in a cycle;
  - modules call each other in a cycle (components of the engine, or scheduler and
    config, which rank alike).
Every cycle is printed with the edges that make it and a symbol for each.
KNOWN lists cycles that are allowed while code moves (none today), each as the set of
files (or modules) that call each other. A cycle outside KNOWN fails; one in KNOWN that is
not found whole (fixed, or broken in part) fails too, so that the list shrinks with
the code: write the smaller cycle there, or remove the entry.
Calls through function pointers (a route's hooks, a shape, a backend's vtable) are not
edges: a table is how a lower file reaches code above it without naming it.
Usage: check_calls.py BUILD_DIR [SOURCE_ROOT] [--map MODULE]
  --map MODULE also prints which files of MODULE each of its files calls, callers first
  (the map docs/ARCHITECTURE.md draws).
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_includes  # noqa: E402  (the module order lives there, once)

# Each entry is a cycle found on the day this list was last shrunk: a frozenset of the
# files (or modules) in it.
KNOWN = set()
ARCHIVE_DIR = re.compile(r"(^|/)(lib[^/]+\.a)\.p/")
# nm -P types of a global definition ('i': an ifunc, as target_clones makes).
DEFINED = set("TDBRVWCGSiu")


def module(path):
    return check_includes.module(path)


def rank(mod):
    top = mod.split("/")[0]
    if top not in check_includes.RANK:
        raise SystemExit(f"call check: module {mod} has no rank in check_includes.RANK")
    return check_includes.rank(mod)


def objects(build):
    """{archive path (relative to build): {object path: source path}} for the libraries
    built from the module trees."""
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        cmds = json.load(f)
    src_root = None
    libs = {}
    for c in cmds:
        m = ARCHIVE_DIR.search(c["output"])
        if not m:
            continue  # an executable's object
        src = os.path.normpath(os.path.join(c["directory"], c["file"]))
        out_rel = os.path.normpath(c["output"])
        lib = out_rel[: m.end(2)]
        libs.setdefault(lib, {})[out_rel] = src
    return libs


def rel_source(src, roots):
    for root in roots:
        rel = os.path.relpath(src, root)
        if not rel.startswith(".."):
            return rel
    return src


def symbols(build, lib):
    """{object: (defined set, undefined set)} from nm over the archive's members."""
    out = subprocess.run(["nm", "-P", "-A", lib], cwd=build, capture_output=True, text=True,
                         check=True).stdout
    table = {}
    for line in out.splitlines():
        head, _, rest = line.partition("]: ")
        if not rest:
            continue
        obj = os.path.normpath(head.partition("[")[2])
        fields = rest.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        d, u = table.setdefault(obj, (set(), set()))
        if kind in ("U", "w", "v"):
            u.add(name)
        elif kind in DEFINED:
            d.add(name)
    return table


def sccs(nodes, edges):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def describe(comp, edges, why):
    lines = []
    for a in sorted(comp):
        for b in sorted(edges.get(a, ())):
            if b in comp:
                syms = sorted(why[(a, b)])
                more = f" and {len(syms) - 3} more" if len(syms) > 3 else ""
                lines.append(f"    {a} -> {b}: {', '.join(syms[:3])}{more}")
    return "\n".join(lines)


def print_map(mod, uses, edges):
    """Each file of mod with the files of mod it calls, in an order where a file comes
    before every file it calls (when the module has no cycle)."""
    files = sorted(f for f in uses if module(f) == mod)
    inner = {f: sorted(g for g in edges.get(f, ()) if module(g) == mod) for f in files}
    depth = {}

    def height(f, seen=()):
        if f not in depth:
            depth[f] = 0 if f in seen else 1 + max(
                [height(g, seen + (f,)) for g in inner[f]] or [-1])
        return depth[f]

    for f in sorted(files, key=lambda f: (-height(f), f)):
        callees = ", ".join(os.path.basename(g) for g in inner[f]) or "-"
        print(f"map: {os.path.basename(f)} -> {callees}")


def main():
    args = sys.argv[1:]
    map_mod = None
    if "--map" in args:
        i = args.index("--map")
        if i + 1 >= len(args):
            raise SystemExit(__doc__)
        map_mod = args[i + 1]
        del args[i:i + 2]
    if not args:
        raise SystemExit(__doc__)
    build = os.path.abspath(args[0])
    roots = [os.path.abspath(args[1])] if len(args) > 1 else []
    roots.append(build)
    libs = objects(build)
    if not libs:
        raise SystemExit(f"call check: no static libraries in {build}/compile_commands.json")
    defined, uses = {}, {}
    for lib, objs in sorted(libs.items()):
        if not os.path.exists(os.path.join(build, lib)):
            raise SystemExit(f"call check: {lib} is not built (run ninja first)")
        for obj, (d, u) in symbols(build, lib).items():
            src = objs.get(obj)
            if src is None:
                continue
            f = rel_source(src, roots)
            if f.split("/")[0] not in check_includes.TREES and not f.startswith("tools/"):
                continue  # test helpers and the like
            for name in d:
                defined.setdefault(name, set()).add(f)
            uses.setdefault(f, set()).update(u)
    edges, why = {}, {}
    for f, names in uses.items():
        for name in names:
            for g in defined.get(name, ()):
                if g != f:
                    edges.setdefault(f, set()).add(g)
                    why.setdefault((f, g), set()).add(name)
    if map_mod:
        print_map(map_mod, uses, edges)
    problems = []
    # Upward edges between modules.
    for (a, b), names in sorted(why.items()):
        if rank(module(b)) > rank(module(a)):
            problems.append(f"upward: {a} ({module(a)}) calls {b} ({module(b)}): "
                            + ", ".join(sorted(names)[:3]))
    # Cycles between files of a module, and between modules.
    inner = {a: {b for b in bs if module(b) == module(a)} for a, bs in edges.items()}
    mod_edges, mod_why = {}, {}
    for (a, b), names in why.items():
        ma, mb = module(a), module(b)
        if ma != mb:
            mod_edges.setdefault(ma, set()).add(mb)
            mod_why.setdefault((ma, mb), set()).add(f"{a}->{b}")
    found = [(c, describe(c, inner, why)) for c in sccs(set(uses), inner)]
    found += [(c, describe(c, mod_edges, mod_why)) for c in sccs(set(mod_edges), mod_edges)]
    seen = set()
    for comp, text in sorted(found, key=lambda x: sorted(x[0])):
        names = " ".join(sorted(comp))
        host = next((k for k in KNOWN if comp <= k), None)
        if host == comp:
            seen.add(comp)
            print(f"known cycle: {names}\n{text}")
        elif host is not None:
            problems.append(f"known cycle {' '.join(sorted(host))} is now only {names}: "
                            f"write the smaller one in KNOWN\n{text}")
            seen.add(host)
        else:
            problems.append(f"cycle: {names}\n{text}")
    for k in sorted(KNOWN - seen, key=sorted):
        problems.append(f"known cycle {' '.join(sorted(k))} no longer exists: remove it "
                        f"from KNOWN")
    for p in problems:
        print("call check: " + p, file=sys.stderr)
    n_edges = sum(len(v) for v in edges.values())
    print(f"{len(uses)} files in {len(libs)} libraries, {n_edges} file edges, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
