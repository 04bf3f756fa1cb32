#!/usr/bin/env python3
"""tests/engine/schema_sample.py - random sentences of the grammars that
engine/grammar/schema.c writes, validated against their schemas.

An independent check of "every output validates": it parses the GBNF the
converter emits (its own small parser, not the engine's), draws N random
sentences of each grammar (bounded depth, short repetitions), parses each as
JSON and validates it with python3-jsonschema under the schema's draft (and
reports format failures with the draft's format checker separately).

    GS_SCHEMA_DUMP_DIR=/tmp/g build/tests/test_grammar_schema \
        --filter 'grammar_schema/shared*'
    python3 tests/engine/schema_sample.py /tmp/g ../shared/golden/schemas/schemas.jsonl 50

Exits 1 when any sentence fails. Not part of the default run: it needs
python3-jsonschema, which the build machines do not all have.
"""
import json, random, re, sys
sys.setrecursionlimit(100000)

def parse(text):
    rules = {}
    for line in text.split('\n'):
        if not line.strip() or line.lstrip().startswith('#'): continue
        name, body = line.split(' ::= ', 1)
        p = P(body)
        alt = p.alt()
        if p.i != len(p.s): raise ValueError('trailing in %s: %r' % (name, p.s[p.i:]))
        rules[name.strip()] = alt
    return rules

class P:
    def __init__(s, t): s.s = t; s.i = 0
    def ws(s):
        while s.i < len(s.s) and s.s[s.i] in ' \t': s.i += 1
    def alt(s):
        alts = [s.seq()]
        while s.i < len(s.s) and s.s[s.i] == '|':
            s.i += 1; alts.append(s.seq())
        return ('alt', alts)
    def seq(s):
        items = []
        while True:
            s.ws()
            if s.i >= len(s.s) or s.s[s.i] in '|)': break
            items.append(s.quant(s.atom()))
        return ('seq', items)
    def esc(s):
        c = s.s[s.i]; s.i += 1
        m = {'n': '\n', 't': '\t', 'r': '\r', '\\': '\\', '"': '"', '[': '[', ']': ']', '-': '-'}
        if c in m: return m[c]
        n = {'x': 2, 'u': 4, 'U': 8}[c]
        v = int(s.s[s.i:s.i+n], 16); s.i += n
        return chr(v)
    def atom(s):
        c = s.s[s.i]
        if c == '"':
            s.i += 1; out = ''
            while s.s[s.i] != '"':
                if s.s[s.i] == '\\': s.i += 1; out += s.esc()
                else: out += s.s[s.i]; s.i += 1
            s.i += 1
            return ('lit', out)
        if c == '[':
            s.i += 1; neg = False
            if s.s[s.i] == '^': neg = True; s.i += 1
            rng = []
            while s.s[s.i] != ']':
                if s.s[s.i] == '\\': s.i += 1; lo = s.esc()
                else: lo = s.s[s.i]; s.i += 1
                hi = lo
                if s.s[s.i] == '-' and s.s[s.i+1] != ']':
                    s.i += 1
                    if s.s[s.i] == '\\': s.i += 1; hi = s.esc()
                    else: hi = s.s[s.i]; s.i += 1
                rng.append((ord(lo), ord(hi)))
            s.i += 1
            return ('cls', neg, rng)
        if c == '(':
            s.i += 1; a = s.alt(); s.ws()
            assert s.s[s.i] == ')', s.s[s.i:]
            s.i += 1
            return a
        if c == '.': s.i += 1; return ('cls', True, [])
        m = re.match(r'[a-zA-Z0-9_-]+', s.s[s.i:])
        if not m: raise ValueError('bad at %r' % s.s[s.i:s.i+20])
        s.i += m.end()
        return ('ref', m.group())
    def quant(s, a):
        if s.i < len(s.s):
            c = s.s[s.i]
            if c == '*': s.i += 1; return ('rep', a, 0, None)
            if c == '+': s.i += 1; return ('rep', a, 1, None)
            if c == '?': s.i += 1; return ('rep', a, 0, 1)
            if c == '{':
                m = re.match(r'\{(\d+)(,(\d*))?\}', s.s[s.i:])
                s.i += m.end()
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                return ('rep', a, lo, hi)
        return a

POOL = [chr(c) for c in range(0x20, 0x7f)] + ['é', 'ß', '中', '😀', '\u0100']
def in_cls(ch, rng):
    return any(lo <= ord(ch) <= hi for lo, hi in rng)

class Gen:
    def __init__(s, rules, rnd):
        s.r = rules; s.rnd = rnd
        s.minlen = {k: 10**9 for k in rules}
        for _ in range(60):
            for k, v in rules.items(): s.minlen[k] = min(s.minlen[k], s.ml(v))
    def ml(s, n):
        t = n[0]
        if t == 'alt': return min(s.ml(x) for x in n[1])
        if t == 'seq': return sum(s.ml(x) for x in n[1])
        if t == 'lit': return len(n[1])
        if t == 'cls': return 1
        if t == 'ref': return s.minlen.get(n[1], 10**9)
        if t == 'rep': return n[2] * s.ml(n[1]) if n[2] else 0
    def g(s, n, depth, out):
        t = n[0]
        if t == 'alt':
            alts = n[1]
            if depth > 25:
                best = min(s.ml(x) for x in alts); alts = [x for x in alts if s.ml(x) == best]
            s.g(s.rnd.choice(alts), depth + 1, out)
        elif t == 'seq':
            for x in n[1]: s.g(x, depth, out)
        elif t == 'lit': out.append(n[1])
        elif t == 'cls':
            neg, rng = n[1], n[2]
            if neg:
                cands = [c for c in POOL if not in_cls(c, rng)]
                out.append(s.rnd.choice(cands))
            else:
                lo, hi = s.rnd.choice(rng)
                if hi - lo > 200 and s.rnd.random() < 0.8:
                    cands = [c for c in POOL if lo <= ord(c) <= hi]
                    if cands: out.append(s.rnd.choice(cands)); return
                out.append(chr(s.rnd.randint(lo, hi)))
        elif t == 'ref': s.g(s.r[n[1]], depth + 1, out)
        elif t == 'rep':
            lo, hi = n[2], n[3]
            if depth > 25: k = lo
            else:
                top = hi if hi is not None else lo + 4
                k = s.rnd.randint(lo, min(top, lo + 4))
                if s.rnd.random() < 0.3: k = lo
            for _ in range(k): s.g(n[1], depth + 1, out)

def sample(text, n, seed=0):
    rules = parse(text)
    for k, v in rules.items():
        def chk(x):
            if x[0] == 'ref': assert x[1] in rules, 'undefined rule %s' % x[1]
            elif x[0] in ('alt', 'seq'): [chk(y) for y in x[1]]
            elif x[0] == 'rep': chk(x[1])
        chk(v)
    assert 'root' in rules
    g = Gen(rules, random.Random(seed))
    outs = []
    for _ in range(n):
        o = []; g.g(rules['root'], 0, o); outs.append(''.join(o))
    return outs

if __name__ == '__main__':
    import jsonschema
    from jsonschema.validators import validator_for
    gdir = sys.argv[1]
    recs = [json.loads(l) for l in open(sys.argv[2])]
    N = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    import os
    bad = 0; checked = 0; fmtbad = 0
    for idx, rec in enumerate(recs, 1):
        p = '%s/%d.gbnf' % (gdir, idx)
        if not os.path.exists(p): continue
        text = open(p, encoding='utf-8').read()
        try:
            outs = sample(text, N, idx)
        except Exception as e:
            print('PARSE-FAIL', rec['id'], repr(e)); bad += 1; continue
        cls = validator_for(rec['schema'], default=jsonschema.Draft202012Validator)
        v = cls(rec['schema']); vf = cls(rec['schema'], format_checker=cls.FORMAT_CHECKER)
        checked += 1
        for o in outs:
            try: inst = json.loads(o)
            except Exception as e:
                print('JSON-FAIL', rec['id'], repr(o[:200])); bad += 1; break
            errs = list(v.iter_errors(inst))
            if errs:
                print('INVALID', rec['id'], errs[0].message[:200], '| at', list(errs[0].absolute_path)); print('   ', o[:300]); bad += 1; break
            ferrs = list(vf.iter_errors(inst))
            if ferrs:
                print('FORMAT', rec['id'], ferrs[0].message[:200]); fmtbad += 1; break
    print('checked', checked, 'bad', bad, 'format-bad', fmtbad)
    sys.exit(1 if bad else 0)
