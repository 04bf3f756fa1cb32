#!/usr/bin/env python3
"""tests/server/soak.py - the traffic driver of the soak (tests/server/test_soak.c).

Drives a running `graphserve serve` on 127.0.0.1 with a bounded number of
clients, each sending one request at a time from a weighted mix (completions
and chat, streamed or not, n > 1, logprobs, stop strings, validation; clients
that reset or close mid-stream or while waiting; slow readers; half-closed
senders; keep-alive pairs; malformed requests), checks every answer's status
and shape, sends the daemon a SIGHUP each interval after rewriting its config
file, and samples the daemon's RSS and open descriptors. Standard library only.

Phases: a warm-up (a burst that touches every KV page, a burst of the largest
requests at once, then the mix), a pause until the daemon is idle (the
baseline sample), then the mix with a pause until idle every sixth of the run
(idle samples: the trend), the last at the deadline (the end sample). It writes a JSON summary to --summary; the C test asserts on it.
"""
import argparse
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time

KEY = 'soak-key-1'
PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park',
           'One day, a big cat', 'Sue had a red ball', 'The sun was hot and', 'Max saw a bird']
STOPS = ['.', ' the', '\n', '!', 'Lily', ' and']
# Two configs the reload alternates between: each changes the log level, the
# key list and the allowed names, so a SIGHUP has allocations to redo. The
# clients' key (KEY) and Host (localhost) are valid under both.
CONFIGS = [
    {'log_level': 'info', 'api_key': [KEY], 'allowed_hosts': ['soak.test'], 'max_tokens': 2048},
    {'log_level': 'warn', 'api_key': [KEY, 'soak-key-2'],
     'allowed_hosts': ['soak.test', '.soak.example'], 'max_tokens': 1536},
]
# A bound on a hang, not a latency check: generous, since the sanitizer
# build's engine is many times slower than the plain one.
IO_TIMEOUT_S = 600
WARM_REQUESTS_PER_CLIENT = 40

# Kind: weight. Each kind is a method Client.k_<kind>.
MIX = {
    'comp': 12, 'chat': 12, 'comp_stream': 10, 'chat_stream': 10, 'validation': 3,
    'reset_stream': 5, 'close_stream': 5, 'reset_waiting': 3, 'slow_reader': 3,
    'half_close': 5, 'keepalive': 3, 'long_prompt': 2, 'bad_json': 2, 'bad_ctype': 2,
    'bad_host': 2, 'no_key': 2, 'garbage': 1, 'short_body': 1, 'misc': 4,
}


class Fail(Exception):
    pass


class DaemonGone(Exception):
    pass


def write_config(path, i):
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(CONFIGS[i % len(CONFIGS)], f)
    os.rename(tmp, path)


def proc_sample(pid):
    """(VmRSS in KiB, open descriptors other than connections, open connections,
    RssAnon in KiB, RssFile in KiB) of pid.

    RssAnon is what the daemon allocated (heap, stacks, the KV pool): a leak
    or fragmentation grows it. RssFile is code and the model file mapped from
    the page cache: it grows as code paths first run (a reload, an error
    path), is bounded by the files' sizes and reclaimable, and is reported
    apart.

    Connections are counted apart: one the daemon has just answered and
    closed stays in its table until its event loop next runs, so the total
    depends on timing by one; everything else must not change. A connection is
    its TCP socket and the two ends of the socketpair that relay it to
    libmicrohttpd (server/tls.h), the daemon's only Unix sockets."""
    rss = anon = rfile = -1
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                rss = int(line.split()[1])
            elif line.startswith('RssAnon:'):
                anon = int(line.split()[1])
            elif line.startswith('RssFile:'):
                rfile = int(line.split()[1])
    if rss < 0:
        raise DaemonGone('the daemon (pid %d) has exited' % pid)
    conns = set()
    for name in ('tcp', 'tcp6'):
        try:
            with open('/proc/%d/net/%s' % (pid, name)) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[3] != '0A':  # not LISTEN
                        conns.add(fields[9])
        except OSError:
            pass
    try:
        with open('/proc/%d/net/unix' % pid) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if len(fields) >= 7:
                    conns.add(fields[6])  # the inode
    except OSError:
        pass
    n_fds = n_conns = 0
    for fd in os.listdir('/proc/%d/fd' % pid):
        try:
            link = os.readlink('/proc/%d/fd/%s' % (pid, fd))
        except OSError:
            continue  # closed meanwhile
        if link.startswith('socket:[') and link[8:-1] in conns:
            n_conns += 1
        else:
            n_fds += 1
    return rss, n_fds, n_conns, anon, rfile


def anon_maps(pid):
    """{mapping: anonymous KiB} from /proc/pid/smaps, a mapping named by its
    address range and path ('[heap]', '[stack]', a file, or '' for an mmap):
    where anonymous memory lives, to tell which mapping a growth is in."""
    maps = {}
    key = None
    try:
        with open('/proc/%d/smaps' % pid) as f:
            for line in f:
                head = line.split(None, 5)
                if '-' in head[0] and len(head) >= 5 and not head[0].endswith(':'):
                    name = head[5].strip() if len(head) > 5 else ''
                    # A named mapping ([heap] grows by brk) keeps its name, not its range.
                    key = '%s %s' % (name, head[1]) if name else '%s %s' % (head[0], head[1])
                elif head[0] == 'Anonymous:' and key:
                    kib = int(head[1])
                    if kib:
                        maps[key] = kib
    except OSError:
        pass
    return maps


def grown_maps(before, after, most=8):
    """The mappings whose anonymous memory changed the most, as printable lines."""
    rows = sorted(((after.get(k, 0) - before.get(k, 0), k) for k in set(before) | set(after)),
                  key=lambda r: -abs(r[0]))
    return ['%+d KiB (%d -> %d) %s' % (d, before.get(k, 0), after.get(k, 0), k)
            for d, k in rows[:most] if d]


def request_bytes(method, path, body=None, host='localhost', ctype='application/json',
                  key=KEY, close=True):
    h = ['%s %s HTTP/1.1' % (method, path), 'Host: ' + host]
    if key:
        h.append('Authorization: Bearer ' + key)
    if body is not None:
        if ctype:
            h.append('Content-Type: ' + ctype)
        h.append('Content-Length: %d' % len(body))
    if close:
        h.append('Connection: close')
    return ('\r\n'.join(h) + '\r\n\r\n').encode() + (body or b'')


class Conn:
    """One client socket and what has been read from it."""

    def __init__(self, port, rcvbuf=0):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            # Before connect, so that the window the daemon sees is small.
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(IO_TIMEOUT_S)
        self.s.connect(('127.0.0.1', port))
        self.buf = b''
        self.read_size = 65536
        self.read_pause_s = 0.0

    def send(self, data):
        self.s.sendall(data)

    def fill(self):
        if self.read_pause_s:
            time.sleep(self.read_pause_s)
        d = self.s.recv(self.read_size)
        if not d:
            raise EOFError('connection closed by the daemon')
        self.buf += d

    def take_until(self, sep):
        while sep not in self.buf:
            self.fill()
        i = self.buf.index(sep)
        out, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return out

    def take(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def head(self):
        lines = self.take_until(b'\r\n\r\n').decode('latin-1').split('\r\n')
        parts = lines[0].split(' ', 2)
        if len(parts) < 2 or not parts[0].startswith('HTTP/1.'):
            raise Fail('bad status line %r' % lines[0])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(':')
            hdrs[k.strip().lower()] = v.strip()
        return int(parts[1]), hdrs

    def body(self, hdrs):
        if hdrs.get('transfer-encoding', '').lower() == 'chunked':
            out = []
            while True:
                size = int(self.take_until(b'\r\n').split(b';')[0], 16)
                if size == 0:
                    while self.take_until(b'\r\n'):
                        pass  # trailers
                    return b''.join(out)
                out.append(self.take(size))
                if self.take(2) != b'\r\n':
                    raise Fail('chunk not followed by CRLF')
        if 'content-length' in hdrs:
            return self.take(int(hdrs['content-length']))
        try:
            while True:
                self.fill()
        except EOFError:
            pass
        out, self.buf = self.buf, b''
        return out

    def response(self):
        status, hdrs = self.head()
        return status, hdrs, self.body(hdrs)

    def reset(self):
        """Leaves with an RST: gone under either reading of a FIN."""
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        self.s.close()

    def close(self):
        self.s.close()


def sse_events(body):
    """The JSON events of an SSE body; raises Fail unless it ends with [DONE]."""
    text = body.decode('utf-8')
    events, done = [], False
    for block in text.split('\n\n')[:-1]:
        if block.startswith(':'):
            continue
        if not block.startswith('data: '):
            raise Fail('unexpected SSE block %r' % block[:80])
        if done:
            raise Fail('an event after [DONE]')
        data = block[6:]
        if data == '[DONE]':
            done = True
        else:
            events.append(json.loads(data))
    if not text.endswith('\n\n'):
        raise Fail('SSE body does not end with a blank line')
    if not done:
        raise Fail('stream without [DONE]')
    return events


def expect(cond, what):
    if not cond:
        raise Fail(what)


def check_error(status, body, want_status, want_type=None):
    expect(status == want_status, 'status %d, expected %d: %.200r' % (status, want_status, body))
    e = json.loads(body).get('error')
    expect(isinstance(e, dict) and isinstance(e.get('message'), str), 'no error object')
    if want_type:
        expect(e.get('type') == want_type, 'error type %r' % e.get('type'))


def check_no_stop(text, p):
    for s in p.get('stop') or []:
        expect(s not in text, 'text %r contains its stop string %r' % (text[:80], s))


def check_whole(status, body, p, chat):
    """A non-streamed completion or chat answer, against its request p."""
    expect(status == 200, 'status %d: %.300r' % (status, body))
    j = json.loads(body)
    expect(j.get('object') == ('chat.completion' if chat else 'text_completion'), 'object')
    n = p.get('n', 1)
    ch = j.get('choices')
    expect(isinstance(ch, list) and len(ch) == n, 'choices: %d expected' % n)
    expect(sorted(c.get('index') for c in ch) == list(range(n)), 'choice indexes')
    for c in ch:
        expect(c.get('finish_reason') in ('stop', 'length'), 'finish %r' % c.get('finish_reason'))
        if chat:
            m = c.get('message') or {}
            expect(m.get('role') == 'assistant' and isinstance(m.get('content'), str), 'message')
            text = m['content']
        else:
            text = c.get('text')
            expect(isinstance(text, str), 'text')
        check_no_stop(text, p)
        if p.get('logprobs'):
            lp = c.get('logprobs')
            if chat:
                expect(isinstance(lp, dict) and isinstance(lp.get('content'), list), 'logprobs')
            else:
                expect(isinstance(lp, dict) and
                       len(lp.get('tokens', [])) == len(lp.get('token_logprobs', [-1])),
                       'logprobs')
    u = j.get('usage') or {}
    expect(isinstance(u.get('prompt_tokens'), int) and
           0 <= u.get('completion_tokens', -1) <= n * p['max_tokens'] and
           u.get('total_tokens') == u['prompt_tokens'] + u['completion_tokens'], 'usage %r' % u)
    return j


def check_stream(status, hdrs, body, p, chat, allow_buffer_full=False):
    """A streamed answer; returns 'ok' or, where allowed, 'buffer_full'."""
    expect(status == 200, 'status %d: %.300r' % (status, body))
    expect(hdrs.get('content-type', '').startswith('text/event-stream'), 'content type')
    events = sse_events(body)
    n = p.get('n', 1)
    texts, fins, usage = [''] * n, [None] * n, 0
    for e in events:
        if 'error' in e:
            expect(allow_buffer_full and e['error'].get('code') == 'stream_buffer_full',
                   'error event %r' % e)
            expect(e is events[-1], 'events after the error event')
            return 'buffer_full'
        expect(e.get('object') == ('chat.completion.chunk' if chat else 'text_completion'),
               'chunk object %r' % e.get('object'))
        if not e.get('choices'):
            expect('usage' in e, 'a chunk without choices or usage')
            usage += 1
            continue
        for c in e['choices']:
            i = c.get('index')
            expect(isinstance(i, int) and 0 <= i < n, 'chunk index %r' % i)
            expect(fins[i] is None, 'a chunk after choice %d finished' % i)
            if chat:
                t = (c.get('delta') or {}).get('content') or ''
            else:
                t = c.get('text') or ''
            texts[i] += t
            if c.get('finish_reason') is not None:
                fins[i] = c['finish_reason']
    for i in range(n):
        expect(fins[i] in ('stop', 'length'), 'choice %d finished with %r' % (i, fins[i]))
        check_no_stop(texts[i], p)
    want_usage = 1 if (p.get('stream_options') or {}).get('include_usage') else 0
    expect(usage == want_usage, '%d usage chunks, expected %d' % (usage, want_usage))
    return 'ok'


class Soak:
    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.stats = {}  # kind -> outcome -> count
        self.failures = []  # the first few of each kind
        self.n_failed = 0
        self.pause = threading.Event()
        self.stop = threading.Event()
        self.busy = 0
        self.hups = 0
        self.samples = []  # (seconds since start, rss KiB, fds)
        self.t0 = time.monotonic()
        self.first_left = a.clients  # clients still sending their warm-up list
        self.log_cv = threading.Condition()
        self.slow_ids = set()  # streams the daemon cut for their slow reader

    def record(self, kind, outcome, msg=None):
        with self.lock:
            k = self.stats.setdefault(kind, {})
            k[outcome] = k.get(outcome, 0) + 1
            if outcome == 'fail':
                self.n_failed += 1
                # The first few of each kind: one kind's many must not hide
                # another's one.
                if k['fail'] <= 3:
                    self.failures.append('%s: %s' % (kind, msg))
                    print('soak: FAIL %s: %s' % (kind, msg), file=sys.stderr, flush=True)

    def total(self):
        with self.lock:
            return sum(sum(k.values()) for k in self.stats.values())

    # ---- plumbing --------------------------------------------------------------------------

    def get(self, path):
        c = Conn(self.a.port)
        try:
            c.send(request_bytes('GET', path))
            return c.response()
        finally:
            c.close()

    def metrics(self):
        status, _, body = self.get('/metrics')
        if status != 200:
            raise Fail('/metrics answered %d' % status)
        m = {}
        for line in body.decode().splitlines():
            if line and not line.startswith('#'):
                k, _, v = line.rpartition(' ')
                m[k] = float(v)
        return m

    def wait_idle(self, timeout_s=180):
        """Waits until nothing runs, waits or holds a page; returns the metrics."""
        end = time.monotonic() + timeout_s
        while True:
            m = self.metrics()
            if (m.get('graphserve_requests_running') == 0 and
                    m.get('graphserve_requests_waiting') == 0 and
                    m.get('graphserve_requests_in_flight') == 0 and
                    m.get('graphserve_kv_pages{state="used"}') == 0):
                return m
            if time.monotonic() > end:
                raise Fail('the daemon did not become idle: %r' % m)
            time.sleep(0.2)

    def quiesce(self):
        """Pauses the clients, waits for the daemon to be idle and samples it."""
        self.pause.set()
        end = time.monotonic() + IO_TIMEOUT_S + 60
        while True:
            with self.lock:
                if self.busy == 0:
                    break
            if time.monotonic() > end:
                raise Fail('clients still busy after the pause')
            time.sleep(0.1)
        m = self.wait_idle()
        # Connections the clients closed go once the daemon has noticed;
        # the last /metrics one may stay until the loop next runs.
        prev = None
        end = time.monotonic() + 60
        while True:
            time.sleep(0.5)
            cur = proc_sample(self.a.pid)
            if (prev == cur and cur[2] <= 1) or time.monotonic() > end:
                return cur, m
            prev = cur

    # ---- the clients ----------------------------------------------------------------------

    def params(self, rng, chat, stream):
        p = {'max_tokens': rng.choice([1, 4, 8, 16, 32, 48, 64]) if rng.random() < 0.9
             else rng.randint(100, 256),
             'temperature': round(rng.uniform(0, 1.2), 2), 'seed': rng.randint(0, 1 << 30)}
        if chat:
            p['messages'] = [{'role': 'user', 'content': rng.choice(PROMPTS)}]
            if rng.random() < 0.2:
                p['messages'].insert(0, {'role': 'system', 'content': 'Tell a short story.'})
        else:
            p['prompt'] = rng.choice(PROMPTS)
        if rng.random() < 0.3:
            p['n'] = rng.randint(2, 4)
        if rng.random() < 0.25:
            if chat:
                p['logprobs'] = True
                p['top_logprobs'] = rng.randint(0, 5)
            else:
                p['logprobs'] = rng.randint(0, 5)
        if rng.random() < 0.25:
            p['stop'] = rng.sample(STOPS, rng.randint(1, 3))
        if stream:
            p['stream'] = True
            if rng.random() < 0.5:
                p['stream_options'] = {'include_usage': True}
        return p

    def post(self, path, p, **kw):
        c = Conn(self.a.port)
        try:
            c.send(request_bytes('POST', path, json.dumps(p).encode(), **kw))
            return c.response()
        finally:
            c.close()

    def k_comp(self, rng, chat=False):
        p = self.params(rng, chat, False)
        status, _, body = self.post('/v1/chat/completions' if chat else '/v1/completions', p)
        check_whole(status, body, p, chat)
        return 'ok'

    def k_chat(self, rng):
        return self.k_comp(rng, True)

    def k_comp_stream(self, rng, chat=False):
        p = self.params(rng, chat, True)
        status, hdrs, body = self.post('/v1/chat/completions' if chat else '/v1/completions', p)
        return check_stream(status, hdrs, body, p, chat)

    def k_chat_stream(self, rng):
        return self.k_comp_stream(rng, True)

    def k_validation(self, rng):
        p = {'prompt': rng.choice(PROMPTS), 'max_tokens': rng.randint(1, 24), 'temperature': 0,
             'validation': True}
        status, _, body = self.post('/v1/completions', p)
        j = check_whole(status, body, p, False)
        v = j.get('validation') or {}
        expect(v.get('status') in ('done', 'timeout'), 'validation %r' % v)
        if v['status'] == 'done':
            expect(v.get('passed') is True, 'validation did not pass: %r' % v)
        return 'ok'

    def long_stream(self, rng):
        """A stream that would run for 600 tokens; returns the connection once
        its first event is in."""
        chat = rng.random() < 0.5
        p = self.params(rng, chat, True)
        p.update(max_tokens=600, ignore_eos=True)
        p.pop('stop', None)
        c = Conn(self.a.port)
        c.send(request_bytes('POST', '/v1/chat/completions' if chat else '/v1/completions',
                             json.dumps(p).encode()))
        status, _ = c.head()
        expect(status == 200, 'status %d' % status)
        while b'data: ' not in c.buf:
            c.fill()
        time.sleep(rng.uniform(0, 0.2))
        return c

    def k_reset_stream(self, rng):
        self.long_stream(rng).reset()
        return 'ok'

    def k_close_stream(self, rng):
        self.long_stream(rng).close()
        return 'ok'

    def k_reset_waiting(self, rng):
        """Gone before any answer: queued, in prefill or decoding."""
        c = Conn(self.a.port)
        p = {'prompt': rng.choice(PROMPTS), 'max_tokens': 600, 'ignore_eos': True}
        c.send(request_bytes('POST', '/v1/completions', json.dumps(p).encode()))
        time.sleep(rng.uniform(0, 0.1))
        if rng.random() < 0.5:
            c.reset()
        else:
            c.close()
        return 'ok'

    def k_slow_reader(self, rng):
        """A small receive buffer and a reader that stops after the response
        head: large logprob chunks (4 MB in all) pile up past
        --max-stream-buffer-bytes, the daemon cancels the stream and logs
        event=slow_reader with its id; only then does the reader read on,
        slowly, and the stream must end with a stream_buffer_full error
        event and [DONE]. Waiting for the log line rather than for a time
        keeps this independent of the engine's speed. The verdict comes after
        rounds of engine events, so while it waits this client asks for a
        two-token completion now and then: once the others have stopped (the
        soak's end), its own requests are the rounds."""
        p = {'messages': [{'role': 'user', 'content': rng.choice(PROMPTS)}], 'max_tokens': 1000,
             'ignore_eos': True, 'logprobs': True, 'top_logprobs': 20, 'n': 2, 'stream': True}
        c = Conn(self.a.port, rcvbuf=4096)
        try:
            c.send(request_bytes('POST', '/v1/chat/completions', json.dumps(p).encode()))
            status, hdrs = c.head()
            expect(status == 200, 'status %d' % status)
            rid = hdrs.get('x-request-id', '')
            end = time.monotonic() + IO_TIMEOUT_S
            while True:
                with self.log_cv:
                    if rid not in self.slow_ids:
                        self.log_cv.wait(0.5)
                    if rid in self.slow_ids:
                        self.slow_ids.discard(rid)
                        break
                expect(time.monotonic() < end, 'no event=slow_reader for %s' % rid)
                status2, _, _ = self.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 2})
                expect(status2 == 200, 'a nudge answered %d' % status2)
            c.read_size, c.read_pause_s = 2048, 0.01
            body = c.body(hdrs)
        finally:
            c.close()
        expect(check_stream(status, hdrs, body, p, True, allow_buffer_full=True) == 'buffer_full',
               'the stream of %s ended without its stream_buffer_full event' % rid)
        return 'buffer_full'

    def follow_log(self):
        """Collects the ids of event=slow_reader lines of the daemon's log."""
        with open(self.a.daemon_log, 'rb') as f:
            rest = b''
            while not self.stop.is_set():
                data = f.read(1 << 20)
                if not data:
                    time.sleep(0.1)
                    continue
                lines = (rest + data).split(b'\n')
                rest = lines.pop()
                for line in lines:
                    i = line.find(b'event=slow_reader id=')
                    if i >= 0:
                        rid = line[i + 21:].split(b' ')[0].decode()
                        with self.log_cv:
                            self.slow_ids.add(rid)
                            self.log_cv.notify_all()

    def k_half_close(self, rng):
        """Sends, then shuts down its sending side: the answer must still come."""
        chat, stream = rng.random() < 0.5, rng.random() < 0.5
        p = self.params(rng, chat, stream)
        c = Conn(self.a.port)
        try:
            c.send(request_bytes('POST', '/v1/chat/completions' if chat else '/v1/completions',
                                 json.dumps(p).encode()))
            c.s.shutdown(socket.SHUT_WR)
            status, hdrs, body = c.response()
        finally:
            c.close()
        if stream:
            return check_stream(status, hdrs, body, p, chat)
        check_whole(status, body, p, chat)
        return 'ok'

    def k_keepalive(self, rng):
        """Two or three requests on one connection."""
        c = Conn(self.a.port)
        try:
            for _ in range(rng.randint(2, 3)):
                chat = rng.random() < 0.5
                p = self.params(rng, chat, False)
                c.send(request_bytes('POST', '/v1/chat/completions' if chat else '/v1/completions',
                                     json.dumps(p).encode(), close=False))
                status, hdrs, body = c.response()
                check_whole(status, body, p, chat)
                expect(hdrs.get('connection', '').lower() != 'close', 'keep-alive refused')
        finally:
            c.close()
        return 'ok'

    def k_long_prompt(self, rng, n_prompt=None, max_tokens=None):
        """A prompt of random token ids: many pages, little sharing."""
        n_prompt = n_prompt or rng.randint(200, 1500)
        p = {'prompt': [rng.randint(3, 511) for _ in range(n_prompt)],
             'max_tokens': max_tokens or rng.randint(1, 32), 'ignore_eos': True}
        status, _, body = self.post('/v1/completions', p)
        j = check_whole(status, body, p, False)
        expect(j['usage']['prompt_tokens'] == n_prompt, 'prompt_tokens')
        return 'ok'

    def k_bad_json(self, rng):
        body = rng.choice([b'{bad', b'{"prompt": "x", "max_tokens": }', b'[1,2', b'',
                           b'{"messages": 5}', b'{"prompt": "x", "max_tokens": -3}',
                           b'{"prompt": "x", "n": 99}', b'\xff\xfe{}'])
        path = rng.choice(['/v1/completions', '/v1/chat/completions'])
        c = Conn(self.a.port)
        try:
            c.send(request_bytes('POST', path, body))
            status, _, resp = c.response()
        finally:
            c.close()
        check_error(status, resp, 400, 'invalid_request_error')
        return 'ok'

    def k_bad_ctype(self, rng):
        p = self.params(rng, False, False)
        status, _, body = self.post('/v1/completions', p,
                                    ctype=rng.choice(['text/plain', 'multipart/form-data']))
        check_error(status, body, 415)
        return 'ok'

    def k_bad_host(self, rng):
        p = self.params(rng, False, False)
        status, _, body = self.post('/v1/completions', p,
                                    host=rng.choice(['evil.example', 'attacker.test:8080']))
        check_error(status, body, 403, 'permission_error')
        return 'ok'

    def k_no_key(self, rng):
        p = self.params(rng, True, False)
        status, _, body = self.post('/v1/chat/completions', p,
                                    key=rng.choice([None, 'wrong-key']))
        check_error(status, body, 401, 'authentication_error')
        return 'ok'

    def k_garbage(self, rng):
        """Not HTTP at all: a 400 or a closed connection, never a hang."""
        c = Conn(self.a.port)
        try:
            c.send(rng.choice([b'GARBAGE\r\n\r\n', b'\x16\x03\x01\x00\x05hello\r\n\r\n',
                               b'GET / HTTP/9.9\r\n\r\n']))
            try:
                status, _, _ = c.response()
            except (EOFError, ConnectionResetError):
                return 'closed'
        finally:
            c.close()
        expect(400 <= status < 600, 'status %d' % status)
        return 'refused'

    def k_short_body(self, rng):
        """Promises a longer body than it sends, then leaves."""
        c = Conn(self.a.port)
        c.send(b'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer '
               + KEY.encode() + b'\r\nContent-Type: application/json\r\nContent-Length: 500\r\n'
               b'\r\n{"prompt": "Once')
        time.sleep(rng.uniform(0, 0.2))
        c.reset() if rng.random() < 0.5 else c.close()
        return 'ok'

    def k_misc(self, rng):
        what = rng.choice(['tokenize', 'detokenize', 'models', 'health', 'ready', 'metrics',
                           'unknown', 'method'])
        if what == 'tokenize':
            status, _, body = self.post('/tokenize', {'content': rng.choice(PROMPTS),
                                                      'with_pieces': rng.random() < 0.5})
            expect(status == 200 and isinstance(json.loads(body).get('tokens'), list), 'tokens')
        elif what == 'detokenize':
            status, _, body = self.post('/detokenize', {'tokens': [1, 403, 407, 261, 378]})
            expect(status == 200 and isinstance(json.loads(body).get('content'), str), 'content')
        elif what in ('models', 'health', 'ready', 'metrics'):
            path = {'models': '/v1/models', 'health': '/health', 'ready': '/ready',
                    'metrics': '/metrics'}[what]
            status, _, body = self.get(path)
            expect(status == 200, '%s answered %d' % (path, status))
        elif what == 'unknown':
            status, _, body = self.get('/v1/nothing-here')
            check_error(status, body, 404)
        else:
            status, _, body = self.get('/v1/completions')
            check_error(status, body, 405)
        return 'ok'

    def run_one(self, rng, kind):
        try:
            outcome = getattr(self, 'k_' + kind)(rng)
            self.record(kind, outcome)
        except (Fail, OSError, EOFError, ValueError, KeyError, TypeError) as e:
            self.record(kind, 'fail', '%s: %s' % (type(e).__name__, e))

    def worker(self, i, first):
        rng = random.Random(self.a.seed * 1000 + i)
        kinds, weights = list(MIX), list(MIX.values())
        queue = list(first)
        if not queue:
            with self.lock:
                self.first_left -= 1
        while not self.stop.is_set():
            if self.pause.is_set():
                time.sleep(0.05)
                continue
            with self.lock:
                self.busy += 1
            try:
                if queue:
                    kind = queue.pop(0)
                    if not queue:
                        with self.lock:
                            self.first_left -= 1
                    if kind == 'fill':
                        try:
                            self.record('long_prompt', self.k_long_prompt(rng, 1900, 64))
                        except (Fail, OSError, EOFError, ValueError, KeyError) as e:
                            self.record('long_prompt', 'fail', '%s: %s' % (type(e).__name__, e))
                        continue
                else:
                    kind = rng.choices(kinds, weights)[0]
                self.run_one(rng, kind)
            finally:
                with self.lock:
                    self.busy -= 1

    # ---- the run --------------------------------------------------------------------------

    def hup(self):
        self.hups += 1
        write_config(self.a.config, self.hups)
        os.kill(self.a.pid, signal.SIGHUP)

    def warm(self, late):
        """True once every client has sent its first requests (however long
        that takes: they hold one of each kind) and, unless late, there have
        been WARM_REQUESTS_PER_CLIENT requests a client."""
        with self.lock:
            return self.first_left == 0 and (late or
                sum(sum(k.values()) for k in self.stats.values()) >=
                WARM_REQUESTS_PER_CLIENT * self.a.clients)

    def sleep_until(self, t_end, next_hup, t_latest=None):
        """Sleeps until t_end (and, given t_latest, until warm() or
        t_latest), sending the SIGHUPs and taking samples due."""
        while True:
            now = time.monotonic()
            if now >= t_end and (t_latest is None or self.warm(now >= t_latest)):
                return next_hup
            if now >= next_hup:
                self.hup()
                next_hup += self.a.hup_seconds
            try:
                rss, fds, conns, _, _ = proc_sample(self.a.pid)
            except (OSError, DaemonGone) as e:
                # Whatever ended it (a crash, or a signal from outside), the
                # rest of the run would only count refused connections.
                self.stop.set()
                raise DaemonGone('%s after %ds' % (e, now - self.t0))
            if not self.samples or now - self.t0 - self.samples[-1][0] >= 10:
                self.samples.append((round(now - self.t0), rss, fds, conns))
            if now - self.last_log >= 60:
                self.last_log = now
                print('soak: t=%ds requests=%d failed=%d hups=%d rss=%dKiB fds=%d+%d' %
                      (now - self.t0, self.total(), self.n_failed, self.hups,
                       self.samples[-1][1], self.samples[-1][2], self.samples[-1][3]),
                      file=sys.stderr, flush=True)
            time.sleep(min(0.5, max(0.01, min(t_end, next_hup) - now)))

    def run(self):
        a = self.a
        self.last_log = self.t0
        # The warm-up: at least a quarter of the run (at most 3 minutes), and
        # enough requests unless that takes over 60% of the run.
        warm = min(180.0, a.seconds / 4.0)
        # Warm-up: the first requests of every client are the largest shapes
        # at once: prompts that together need more than the whole KV pool (so
        # every page has been written once), then slow readers, wide logprob
        # streams and validations side by side.
        # Between them the clients' first lists also hold every kind once, so
        # that each kind runs however slow the machine is.
        first = ['fill', 'slow_reader', 'chat_stream', 'validation', 'keepalive', 'long_prompt']
        kinds = list(MIX)
        threads = [threading.Thread(target=self.worker,
                                    args=(i, first + kinds[i::a.clients]), daemon=True)
                   for i in range(a.clients)]
        threading.Thread(target=self.follow_log, daemon=True).start()
        for t in threads:
            t.start()
        next_hup = self.t0 + a.hup_seconds
        next_hup = self.sleep_until(self.t0 + warm, next_hup, self.t0 + 0.6 * a.seconds)
        (rss0, fds0, conns0, anon0, file0), m0 = self.quiesce()
        maps0 = anon_maps(a.pid)
        n_warm = self.total()
        t_base = time.monotonic()
        print('soak: baseline after %d requests: rss=%dKiB (anon %d, file %d) fds=%d '
              'connections=%d' % (n_warm, rss0, anon0, file0, fds0, conns0),
              file=sys.stderr, flush=True)
        # Idle checkpoints along the way: a leak climbs from one to the next,
        # a high-water mark stays put. Only the last one is asserted on.
        idle = [(round(t_base - self.t0), n_warm, rss0, fds0, conns0, anon0, file0) +
                heap_kib(m0)]
        every = max(60.0, a.seconds / 6.0)
        next_hup = max(next_hup, t_base)
        while True:
            self.pause.clear()
            t_stop = min(self.t0 + a.seconds, time.monotonic() + every)
            next_hup = self.sleep_until(t_stop, next_hup)
            (rss1, fds1, conns1, anon1, file1), m1 = self.quiesce()
            idle.append((round(time.monotonic() - self.t0), self.total(), rss1, fds1, conns1,
                         anon1, file1) + heap_kib(m1))
            print('soak: idle after %d requests: rss=%dKiB fds=%d connections=%d '
                  '(anon %d, file %d; heap in use %d, free %d)' % idle[-1][1:],
                  file=sys.stderr, flush=True)
            if t_stop >= self.t0 + a.seconds:
                break
        grown = grown_maps(maps0, anon_maps(a.pid))
        for g in grown:
            print('soak: anonymous memory changed in %s' % g, file=sys.stderr, flush=True)
        self.stop.set()
        for t in threads:
            t.join(IO_TIMEOUT_S)
        # Still serving after it all.
        p = {'prompt': 'Once upon a time', 'max_tokens': 8, 'temperature': 0}
        status, _, body = self.post('/v1/completions', p)
        alive = True
        try:
            check_whole(status, body, p, False)
        except (Fail, ValueError) as e:
            alive = False
            self.record('final', 'fail', str(e))
        summary = {
            'seconds': round(time.monotonic() - self.t0),
            'warmup_seconds': round(t_base - self.t0),
            'clients': a.clients, 'seed': a.seed, 'hups': self.hups,
            'requests': self.total(), 'requests_warmup': n_warm, 'failed': self.n_failed,
            'failures': self.failures, 'by_kind': self.stats,
            'rss_kib_warm': rss0, 'rss_kib_end': rss1, 'fds_warm': fds0, 'fds_end': fds1,
            'rss_anon_kib_warm': anon0, 'rss_anon_kib_end': anon1,
            'rss_file_kib_warm': file0, 'rss_file_kib_end': file1,
            'connections_warm': conns0, 'connections_end': conns1,
            'rss_kib_max': max(s[1] for s in self.samples),
            'anon_maps_grown': grown,
            'heap_in_use_kib_warm': idle[0][7], 'heap_in_use_kib_end': idle[-1][7],
            'heap_free_kib_warm': idle[0][8], 'heap_free_kib_end': idle[-1][8],
            'pages_used_end': m1.get('graphserve_kv_pages{state="used"}'),
            'pages_cached_end': m1.get('graphserve_kv_pages{state="cached"}'),
            'slow_reader_cancellations': m1.get('graphserve_slow_reader_cancellations_total'),
            'cancellations': m1.get('graphserve_cancellations_total'),
            'alive': alive, 'idle': idle, 'samples': self.samples,
        }
        with open(a.summary, 'w') as f:
            json.dump(summary, f)
        return 0


def heap_kib(m):
    """(in use, free) KiB of the allocator's heap from /metrics; -1 where the
    daemon does not report them (not glibc)."""
    return tuple(int(m[k]) // 1024 if k in m else -1 for k in
                 ('graphserve_heap_bytes{state="in_use"}', 'graphserve_heap_bytes{state="free"}'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--port', type=int, required=True)
    ap.add_argument('--pid', type=int, required=True)
    ap.add_argument('--config', required=True, help='the config file the daemon reloads')
    ap.add_argument('--seconds', type=float, default=1800)
    ap.add_argument('--hup-seconds', type=float, default=0,
                    help='between SIGHUPs (default 60, or a quarter of a shorter run)')
    ap.add_argument('--clients', type=int, default=12)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--summary', required=True)
    ap.add_argument('--daemon-log', required=True, help="the daemon's stderr, for its slow_reader lines")
    ap.add_argument('--write-config', action='store_true',
                    help='only write the first config to --config and exit')
    a = ap.parse_args()
    if not a.hup_seconds:
        a.hup_seconds = min(60.0, a.seconds / 4.0)
    if a.write_config:
        write_config(a.config, 0)
        return 0
    try:
        return Soak(a).run()
    except DaemonGone as e:
        print('soak: %s; its log says why' % e, file=sys.stderr, flush=True)
        return 3


if __name__ == '__main__':
    sys.exit(main())
