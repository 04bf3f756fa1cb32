#!/usr/bin/env python3
"""Structured outputs against the real daemon, checked by independent parsers.

    structured_outputs.py PORT CASE [ARGS...]

Cases:
  grammars            GBNF grammars of several kinds (arithmetic, lists, a C subset,
                      chess moves); every finished output parses under Python's own
                      parser or regex for the same language
  json_object         response_format json_object, plain and streamed, n > 1: json.loads
  schemas             hand-written JSON Schemas, outputs validated with python3-jsonschema
  schema_file PATH [N]  the first N (all) schemas of shared/golden/schemas/schemas.jsonl:
                      each is refused with a 400 naming a keyword and its path, or every
                      finished output validates; prints the fraction accepted
  errors              malformed structured-output requests get 400s naming the field
  isolation           a grammar whose parse blows up ends only its own sequence
  combos              a grammar with a stop string, with logprobs, with n > 1 streamed
  preemption          (daemon with a small KV pool) concurrent schema requests that preempt
                      each other still give valid documents

The model is a random-weight or tiny one: only the grammar can make its output valid.
Outputs that stop at max_tokens are unfinished and not judged, but each case needs
finished outputs to count. Exit status 0 when every check holds.
"""
import ast
import json
import re
import sys
import threading
import urllib.error
import urllib.request

PORT = int(sys.argv[1])
CASE = sys.argv[2]
BASE = "http://127.0.0.1:%d" % PORT
failures = []


def post(path, body, stream=False):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            data = resp.read().decode()
            return resp.status, dict(resp.headers), data
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def sse_text(data):
    """The concatenated content of a streamed chat answer, and its finish reason."""
    text, finish = "", None
    for line in data.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            text += ch.get("delta", {}).get("content") or ""
            finish = ch.get("finish_reason") or finish
    return text, finish


# ---- GBNF grammars and their independent oracles ------------------------------------------

def arith_ok(s):
    try:
        tree = ast.parse(s, mode="eval")
    except SyntaxError:
        return False
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub,
               ast.Mult, ast.Div, ast.USub)
    return all(isinstance(n, allowed) for n in ast.walk(tree))


C_IDENT = r"[a-z_][a-z0-9_]{0,7}"
C_EXPR = r"(?:%s|[0-9]{1,4})(?: [-+*] (?:%s|[0-9]{1,4}))*" % (C_IDENT, C_IDENT)
C_STMT = r"(?:int %s = %s;|%s = %s;|return %s;)" % (C_IDENT, C_EXPR, C_IDENT, C_EXPR, C_EXPR)

GRAMMARS = [
    ("arithmetic",
     'root ::= expr\n'
     'expr ::= term (" " [-+] " " term){0,6}\n'
     'term ::= factor (" " [*/] " " factor){0,3}\n'
     'factor ::= [1-9] [0-9]{0,3} | "(" expr ")" | "-" factor\n',
     arith_ok),
    ("list",
     'root ::= ("- " item "\\n"){1,6}\n'
     'item ::= [a-z]{1,10} (" " [a-z]{1,10}){0,4}\n',
     lambda s: re.fullmatch(r"(- [a-z]{1,10}( [a-z]{1,10}){0,4}\n){1,6}", s) is not None),
    ("c_subset",
     'root ::= "int main() {\\n" (stmt "\\n"){1,5} "}"\n'
     'stmt ::= "  " ("int " ident " = " expr ";" | ident " = " expr ";" | "return " expr ";")\n'
     'expr ::= operand (" " [-+*] " " operand){0,4}\n'
     'operand ::= ident | [0-9]{1,4}\n'
     'ident ::= [a-z_] [a-z0-9_]{0,7}\n',
     lambda s: re.fullmatch(r"int main\(\) \{\n(  %s\n){1,5}\}" % C_STMT, s) is not None),
    ("chess",
     'root ::= move (" " move){0,9}\n'
     'move ::= (piece? [a-h]? "x"? square promo? | "O-O" | "O-O-O") check?\n'
     'piece ::= [KQRBN]\nsquare ::= [a-h] [1-8]\npromo ::= "=" [QRBN]\ncheck ::= [+#]\n',
     lambda s: re.fullmatch(
         r"((([KQRBN]?[a-h]?x?[a-h][1-8](=[QRBN])?)|O-O|O-O-O)[+#]?)"
         r"( (([KQRBN]?[a-h]?x?[a-h][1-8](=[QRBN])?)|O-O|O-O-O)[+#]?){0,9}", s) is not None),
    ("utf8",
     'root ::= "«" [à-ÿ]{1,8} "» " [α-ω]{1,8}\n',
     lambda s: re.fullmatch(r"«[à-ÿ]{1,8}» [α-ω]{1,8}", s) is not None),
]


def case_grammars():
    for name, gbnf, oracle in GRAMMARS:
        finished = 0
        for seed in range(1, 7):
            st, _, data = post("/v1/completions", {
                "prompt": "Once upon a time", "max_tokens": 400, "temperature": 1.0,
                "seed": seed, "grammar": gbnf})
            check(st == 200, "%s: status %d: %s" % (name, st, data[:300]))
            if st != 200:
                continue
            ch = json.loads(data)["choices"][0]
            if ch["finish_reason"] == "stop":
                finished += 1
                check(oracle(ch["text"]), "%s: seed %d: %r does not parse" % (name, seed, ch["text"]))
        print("grammar %-10s %d of 6 finished, all parse" % (name, finished))
        check(finished >= 3, "%s: only %d of 6 outputs finished" % (name, finished))


def case_json_object():
    msgs = [{"role": "user", "content": "Describe a cat as JSON."}]
    st, headers, data = post("/v1/chat/completions", {
        "messages": msgs, "max_tokens": 600, "temperature": 1.0, "seed": 7, "n": 4,
        "response_format": {"type": "json_object"}})
    check(st == 200, "json_object: status %d: %s" % (st, data[:300]))
    check("response_format" not in headers.get("X-Ignored-Fields", ""),
          "json_object: response_format listed as ignored")
    finished = 0
    for ch in json.loads(data)["choices"]:
        if ch["finish_reason"] == "stop":
            finished += 1
            try:
                check(isinstance(json.loads(ch["message"]["content"]), dict),
                      "json_object: not an object: %r" % ch["message"]["content"])
            except ValueError as e:
                check(False, "json_object: %s: %r" % (e, ch["message"]["content"]))
    st, _, data = post("/v1/chat/completions", {
        "messages": msgs, "max_tokens": 600, "temperature": 1.0, "seed": 8, "stream": True,
        "response_format": {"type": "json_object"}})
    text, finish = sse_text(data)
    if finish == "stop":
        finished += 1
        try:
            check(isinstance(json.loads(text), dict), "streamed json_object: %r" % text)
        except ValueError as e:
            check(False, "streamed json_object: %s: %r" % (e, text))
    print("json_object: %d of 5 finished, all parse" % finished)
    check(finished >= 2, "json_object: only %d of 5 finished" % finished)


# ---- JSON Schemas -------------------------------------------------------------------------

HAND_SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 150}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                      "ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string",
                                                                          "maxLength": 6},
                                               "maxItems": 3}},
     "required": ["color"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object",
                        "properties": {"v": {"type": "integer", "minimum": -9, "maximum": 9},
                                       "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                "maxItems": 2}},
                        "required": ["v"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "integer"}, {"type": "null"}]},
]

REFUSAL = re.compile(r"unsupported keyword '[^']+' at #")


def jsonschema_validator(schema, draft):
    import jsonschema
    cls = {"draft4": jsonschema.Draft4Validator, "draft7": jsonschema.Draft7Validator,
           "draft202012": jsonschema.Draft202012Validator}.get(draft, jsonschema.Draft202012Validator)
    return cls(schema)


def closing_bias():
    """logit_bias on the tokens that close strings (+100, the most a client may
    give), objects and arrays (+50: less, since they may also sit inside a
    string, which the quote must end first).

    A random-weight model inside a JSON string almost never picks a quote among
    hundreds of allowed tokens (it falls into loops of one token), so most free
    outputs stop at max_tokens and go unjudged. With the bias it closes
    everything wherever the grammar lets it: the shortest document the schema's
    required properties, minimum lengths and counts allow. The grammar must
    keep that valid too (the mask applies before the bias)."""
    st, _, data = post("/tokenize", {"content": 'a"}]', "with_pieces": True})
    bias = {}
    for t in json.loads(data)["tokens"]:
        if t["piece"] in ('"', "}", "]"):
            bias[str(t["id"])] = 100 if t["piece"] == '"' else 50
    check(len(bias) == 3, "closing tokens not found: %s" % data)
    return bias


def run_schema(schema, draft, label, n=2, max_tokens=2000, bias=None):
    """Returns 'refused', 'accepted' (with finished outputs judged) or 'error'."""
    body = {
        "messages": [{"role": "user", "content": "Answer in JSON."}],
        "max_tokens": max_tokens, "temperature": 1.0, "seed": 11, "n": n,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "answer", "schema": schema, "strict": True}}}
    if bias:
        body["logit_bias"] = bias
    st, _, data = post("/v1/chat/completions", body)
    if st == 400:
        err = json.loads(data)["error"]
        check(err["param"] == "response_format.json_schema.schema",
              "%s: 400 for param %r: %s" % (label, err["param"], err["message"]))
        check(REFUSAL.search(err["message"]) is not None or "limit" in err["message"]
              or "max_" in err["message"],
              "%s: refusal does not name a keyword and path: %s" % (label, err["message"]))
        return "refused", 0, 0, err["message"]
    check(st == 200, "%s: status %d: %s" % (label, st, data[:300]))
    if st != 200:
        return "error", 0, 0, data[:200]
    v = jsonschema_validator(schema, draft)
    finished = valid = 0
    for ch in json.loads(data)["choices"]:
        if ch["finish_reason"] != "stop":
            continue
        finished += 1
        text = ch["message"]["content"]
        try:
            doc = json.loads(text)
        except ValueError as e:
            check(False, "%s: output is not JSON (%s): %r" % (label, e, text[:400]))
            continue
        errs = list(v.iter_errors(doc))
        check(not errs, "%s: output does not validate: %s: %r" %
              (label, errs[0].message[:200] if errs else "", text[:400]))
        valid += not errs
    return "accepted", finished, valid, ""


def case_schemas():
    for i, schema in enumerate(HAND_SCHEMAS):
        kind, finished, valid, _ = run_schema(schema, "draft202012", "hand schema %d" % i, n=3)
        check(kind == "accepted", "hand schema %d was %s" % (i, kind))
        check(finished >= 1, "hand schema %d: no output finished" % i)
        print("hand schema %d: %s, %d finished, %d valid" % (i, kind, finished, valid))
    # Streamed: the deltas concatenate to a valid document.
    st, _, data = post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "JSON please"}], "max_tokens": 800,
        "temperature": 1.0, "seed": 5, "stream": True,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "s", "schema": HAND_SCHEMAS[0]}}})
    text, finish = sse_text(data)
    check(finish == "stop", "streamed schema did not finish: %s" % finish)
    if finish == "stop":
        errs = list(jsonschema_validator(HAND_SCHEMAS[0], "draft202012").iter_errors(json.loads(text)))
        check(not errs, "streamed schema output does not validate: %r" % text)


# The free sample of each shared schema stops here: a random-weight model seldom closes a
# string by itself (closing_bias says why), so a long free run mostly runs out anyway, and
# it was most of this suite's time (200 schemas x 2000 tokens one after another took over
# 800 s on a loaded 2-core machine). The pressed-to-close sample, which the check below is
# on, keeps the full length.
FREE_MAX_TOKENS = 256
# Schemas in flight at once: the daemon batches them, as it would any clients.
SCHEMA_FILE_CLIENTS = 4


def schema_file_row(row, bias):
    """(kind, free outputs finished, closed outputs finished, refusal message) of one row:
    free sampling first, then, if accepted, pressed to close."""
    kind, finished, _, msg = run_schema(row["schema"], row["draft"], row["id"], n=1,
                                        max_tokens=FREE_MAX_TOKENS)
    forced = 0
    if kind == "accepted":
        _, forced, _, _ = run_schema(row["schema"], row["draft"], row["id"] + " (closing)", n=1,
                                     bias=bias)
    return kind, finished, forced, msg


def case_schema_file(path, limit):
    import concurrent.futures
    rows = [json.loads(l) for l in open(path, encoding="utf-8")]
    if limit:
        rows = rows[:limit]
    accepted = refused = finished_docs = 0
    unfinished = []
    reasons = {}
    bias = closing_bias()
    forced = 0
    with concurrent.futures.ThreadPoolExecutor(SCHEMA_FILE_CLIENTS) as pool:
        results = list(pool.map(lambda row: schema_file_row(row, bias), rows))
    for row, (kind, finished, f2, msg) in zip(rows, results):
        if kind == "accepted":
            accepted += 1
            finished_docs += finished
            forced += f2
            if not finished and not f2:
                unfinished.append(row["id"])
        elif kind == "refused":
            refused += 1
            m = re.search(r"keyword '([^']+)'", msg)
            key = m.group(1) if m else msg[:60]
            reasons[key] = reasons.get(key, 0) + 1
    print("schemas: %d of %d accepted (%.1f%%), %d refused; finished and validated: %d free "
          "outputs, %d pressed to close; %d schemas with no finished output" %
          (accepted, len(rows), 100.0 * accepted / len(rows), refused, finished_docs, forced,
           len(unfinished)))
    if unfinished:
        print("no finished output:", " ".join(unfinished))
    print("refused by keyword:", json.dumps(dict(sorted(reasons.items(), key=lambda kv: -kv[1]))))
    print("SCHEMA_FILE accepted=%d total=%d finished=%d forced=%d" % (accepted, len(rows), finished_docs, forced))
    check(forced >= accepted - accepted // 10,
          "pressed to close, only %d of %d accepted schemas gave a finished output" %
          (forced, accepted))


def case_errors():
    base = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    cases = [
        ({"grammar": "root ::= nope"}, "grammar", "rule 'nope'"),
        ({"grammar": 42}, "grammar", "must be a string"),
        ({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, "grammar",
         "cannot both"),
        ({"response_format": {"type": "xml"}}, "response_format.type", "xml"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "name"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
         "response_format.json_schema.name", "name"),
        ({"response_format": {"type": "json_schema",
                              "json_schema": {"name": "a", "schema": {"type": "string"},
                                              "extra": 1}}},
         "response_format.json_schema", "extra"),
        ({"response_format": {"type": "json_object", "schema": {}}}, "response_format", "schema"),
        ({"response_format": {"type": "json_schema",
                              "json_schema": {"name": "a", "schema": {"type": "object",
                                                                      "not": {"type": "null"}}}}},
         "response_format.json_schema.schema", "'not' at #"),
        ({"grammar": "root ::= root \"a\""}, "grammar", "left recursion"),
    ]
    for extra, param, needle in cases:
        body = dict(base, **extra)
        st, _, data = post("/v1/chat/completions", body)
        check(st == 400, "%r: status %d" % (extra, st))
        if st == 400:
            err = json.loads(data)["error"]
            check(err["type"] == "invalid_request_error", "%r: type %s" % (extra, err["type"]))
            check(err["param"] == param, "%r: param %r, want %r" % (extra, err["param"], param))
            check(needle in err["message"], "%r: message %r lacks %r" %
                  (extra, err["message"], needle))
    print("errors: %d cases" % len(cases))


def case_isolation():
    """Every 'a' opens two ways to continue that match nothing (p and q), so the
    parse stacks double with each byte and only more a's are allowed, until the
    matcher's limit ends that sequence; a plain request running beside it is
    unharmed."""
    results = {}

    def bad():
        results["bad"] = post("/v1/completions", {
            "prompt": "x", "max_tokens": 200, "temperature": 0,
            "grammar": 'root ::= x\nx ::= "a" x "b"? | "a" x "c"? | "a"\n'})

    def good():
        results["good"] = post("/v1/completions", {
            "prompt": "Once upon a time", "max_tokens": 60, "temperature": 0,
            "ignore_eos": True})

    ts = [threading.Thread(target=bad), threading.Thread(target=good)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    st, _, data = results["good"]
    check(st == 200, "the plain request failed beside the bad grammar: %d %s" % (st, data[:200]))
    if st == 200:
        ch = json.loads(data)["choices"][0]
        check(ch["finish_reason"] == "length", "plain request: %s" % ch["finish_reason"])
    st, _, data = results["bad"]
    print("isolation: bad grammar -> %d %s" % (st, data[:200]))
    check(st >= 400 or '"error"' in data, "the exploding grammar did not end in an error")
    check("max_stacks" in data or "max_mask_work" in data or "max_stack_depth" in data,
          "the error does not name the limit: %s" % data[:300])


def case_combos():
    # A stop string inside the grammar's language cuts the output there.
    st, _, data = post("/v1/completions", {
        "prompt": "x", "max_tokens": 20, "temperature": 1.0, "seed": 3, "stop": ["yy"],
        "grammar": 'root ::= "x"{3} "yy" "z"{3}\n'})
    check(st == 200, "stop: %d %s" % (st, data[:200]))
    if st == 200:
        ch = json.loads(data)["choices"][0]
        check(ch["text"] == "xxx" and ch["finish_reason"] == "stop",
              "stop: %r finished %s" % (ch["text"], ch["finish_reason"]))
    # logprobs report the model's distribution; the tokens are the grammar's text.
    st, _, data = post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 300, "temperature": 1.0,
        "seed": 4, "logprobs": True, "top_logprobs": 3,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "s", "schema": HAND_SCHEMAS[2]}}})
    check(st == 200, "logprobs: %d %s" % (st, data[:200]))
    if st == 200:
        ch = json.loads(data)["choices"][0]
        lp = ch["logprobs"]["content"]
        text = ch["message"]["content"]
        check("".join(t["token"] for t in lp) == text, "logprobs tokens do not spell the text")
        check(all(t["logprob"] <= 0 and len(t["top_logprobs"]) == 3 for t in lp),
              "logprobs out of shape")
        if ch["finish_reason"] == "stop":
            errs = list(jsonschema_validator(HAND_SCHEMAS[2], "draft202012").iter_errors(
                json.loads(text)))
            check(not errs, "logprobs run: invalid output %r" % text)
    # n > 1, streamed: every choice's deltas make a valid document.
    st, _, data = post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 400, "temperature": 1.0,
        "seed": 6, "n": 3, "stream": True,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "s", "schema": HAND_SCHEMAS[0]}}})
    texts, finish = {}, {}
    for line in data.splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:]).get("choices", []):
                texts[c["index"]] = texts.get(c["index"], "") + (c["delta"].get("content") or "")
                finish[c["index"]] = c.get("finish_reason") or finish.get(c["index"])
    check(sorted(texts) == [0, 1, 2], "n=3 stream: choices %r" % sorted(texts))
    for i, t in texts.items():
        if finish.get(i) == "stop":
            errs = list(jsonschema_validator(HAND_SCHEMAS[0], "draft202012").iter_errors(
                json.loads(t)))
            check(not errs, "n=3 stream, choice %d: invalid %r" % (i, t))
    print("combos: stop, logprobs, n=3 streamed")


def metric(name):
    with urllib.request.urlopen(BASE + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return -1


def case_preemption():
    """Eight schema requests at once on a KV pool that holds about one: the
    scheduler preempts and resumes them; each matcher is part of its
    sequence's state, so every finished output is still a valid document."""
    before = metric("graphserve_preemptions_total")
    results = []

    def one(seed):
        results.append(post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "x"}], "max_tokens": 180,
            "temperature": 1.0, "seed": seed,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "s", "schema": HAND_SCHEMAS[3]}}}))

    ts = [threading.Thread(target=one, args=(s,)) for s in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    finished = 0
    v = jsonschema_validator(HAND_SCHEMAS[3], "draft202012")
    for st, _, data in results:
        check(st == 200, "preemption: %d %s" % (st, data[:200]))
        if st != 200:
            continue
        ch = json.loads(data)["choices"][0]
        if ch["finish_reason"] == "stop":
            finished += 1
            errs = list(v.iter_errors(json.loads(ch["message"]["content"])))
            check(not errs, "preemption: invalid %r" % ch["message"]["content"])
    after = metric("graphserve_preemptions_total")
    print("preemption: %d preemptions, %d of 8 finished, all valid" % (after - before, finished))
    check(after > before, "no preemption happened: the test tested nothing")
    check(finished >= 1, "no output finished")


if CASE == "grammars":
    case_grammars()
elif CASE == "json_object":
    case_json_object()
elif CASE == "schemas":
    case_schemas()
elif CASE == "schema_file":
    case_schema_file(sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
elif CASE == "errors":
    case_errors()
elif CASE == "isolation":
    case_isolation()
elif CASE == "combos":
    case_combos()
elif CASE == "preemption":
    case_preemption()
else:
    sys.exit("unknown case " + CASE)
if failures:
    print("%d check(s) failed" % len(failures), file=sys.stderr)
    sys.exit(1)
