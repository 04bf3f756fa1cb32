"""tests/server/hostile_client.py - clients that misbehave the way attackers and odd
proxies do, for tests/server/test_http_hostile.c. Each subcommand talks to the
daemon on 127.0.0.1 over raw sockets and prints one JSON object on stdout; the C
test asserts on it. Every wait has a bound that only a hung daemon reaches.

  framing PORT                    each framing case on its own connection
  raw PORT HOST ORIGIN CTYPE      one POST /tokenize with these headers ('-': none)
  hold PORT N SRC READY STOP      N connections from SRC that drip header bytes,
                                  until STOP exists; READY is written once all are open
  drip PORT BYTES                 one connection dripping BYTES of headers
  halfclose PORT PATH BODYFILE GO send, shut down the sending side once GO exists,
                                  read the answer
  noread PORT BODYFILE GO [PATH]  send a stream request (to PATH, default
                                  /v1/completions) with a small receive buffer and
                                  read nothing until GO exists, then read to the end
  finmany PORT N CLIENTS          CLIENTS threads each send N requests, each followed at
                                  once by a FIN, and count the whole answers
"""
import json
import os
import socket
import sys
import time

HANG = 100.0  # seconds: only a hung daemon gets here


def read_to_close(s, bound=HANG):
    """Reads until the server closes; (bytes, closed) where closed is False on a hang."""
    s.settimeout(bound)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return out, True
            out += b
    except socket.timeout:
        return out, False
    except OSError:
        return out, True


def parse(raw, closed):
    text = raw.decode("latin-1")
    head, _, body = text.partition("\r\n\r\n")
    status = int(head.split(" ")[1]) if head.startswith("HTTP/1.") else 0
    try:
        js = json.loads(body)
    except ValueError:
        js = None
    return {"status": status, "closed": closed, "head": head, "body": body[:200000], "json": js,
            "status_lines": text.count("HTTP/1.1 ")}


def send_raw(port, data, src="127.0.0.1"):
    s = socket.create_connection(("127.0.0.1", port), timeout=HANG, source_address=(src, 0))
    s.sendall(data)
    r = parse(*read_to_close(s))
    s.close()
    return r


def post(path, headers, body):
    """A POST whose connection closes after the answer, so that reading to
    the close ends with the answer."""
    h = "".join("%s: %s\r\n" % kv for kv in headers + [("Connection", "close")])
    return ("POST %s HTTP/1.1\r\n%s\r\n" % (path, h)).encode() + body


BODY = b'{"prompt":"Once","max_tokens":2}'
CL = ("Content-Length", str(len(BODY)))
HOST = ("Host", "localhost")


def framing(port):
    cases = {
        "two_content_lengths": post("/v1/completions", [HOST, CL, ("Content-Length", "5")], BODY),
        "same_content_length_twice": post("/v1/completions", [HOST, CL, CL], BODY),
        "length_and_chunked": post("/v1/completions",
                                   [HOST, ("Content-Length", "5"), ("Transfer-Encoding", "chunked")],
                                   b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n"),
        "unknown_coding": post("/v1/completions", [HOST, ("Transfer-Encoding", "gzip")], BODY),
        "coding_list": post("/v1/completions", [HOST, ("Transfer-Encoding", "gzip, chunked")],
                            BODY),
        "two_codings": post("/v1/completions", [HOST, ("Transfer-Encoding", "chunked"),
                                                ("Transfer-Encoding", "chunked")], BODY),
        "two_hosts": b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: 127.0.0.1\r\n"
                     b"Connection: close\r\n\r\n",
        "bad_host_syntax": b"GET /health HTTP/1.1\r\nHost: local host:x\r\nConnection: close\r\n\r\n",
        # MHD itself refuses these three before any route runs.
        "no_host": b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n",
        "http10_without_host": b"GET /health HTTP/1.0\r\n\r\n",
        "invalid_length": post("/v1/completions", [HOST, ("Content-Length", "12abc")], BODY),
        "space_before_colon": post("/v1/completions", [HOST, ("Content-Length ", str(len(BODY)))],
                                   BODY),
    }
    return {name: send_raw(port, data) for name, data in cases.items()}


def raw(port, host, origin, ctype):
    headers = [] if host == "-" else [("Host", host)]
    if origin != "-":
        headers.append(("Origin", origin))
    if ctype != "-":
        headers.append(("Content-Type", ctype))
    body = b'{"content":"hi"}'
    headers.append(("Content-Length", str(len(body))))
    return send_raw(port, post("/tokenize", headers, body))


def hold(port, n, src, ready, stop):
    """Connections that send a request line and then one header byte at a
    time: MHD's idle timer restarts at every byte, so only a deadline on the
    whole request or eviction frees them. Reports how many the server cut."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=HANG, source_address=(src, 0))
        s.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
        socks.append(s)
    open(ready, "w").write("1")
    cut = [False] * n
    end = time.monotonic() + HANG
    while not os.path.exists(stop) and time.monotonic() < end:
        for i, s in enumerate(socks):
            if cut[i]:
                continue
            try:
                s.sendall(b"a")
            except OSError:
                cut[i] = True
        time.sleep(0.05)
    # A cut connection has the server's FIN (its shutdown) even where a
    # write has not failed yet.
    for i, s in enumerate(socks):
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                cut[i] = True
        except BlockingIOError:
            pass
        except OSError:
            cut[i] = True
        s.close()
    return {"opened": n, "cut": sum(cut)}


def drip(port, total):
    """One header byte every 10 ms, BYTES of them: how far it got before the
    server closed the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=HANG)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
    sent = 0
    closed = False
    while sent < total:
        try:
            s.sendall(b"a")
        except OSError:
            closed = True
            break
        sent += 1
        time.sleep(0.01)
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed = True
                break
        except BlockingIOError:
            pass
        except OSError:
            closed = True
            break
        s.setblocking(True)
    s.close()
    return {"sent": sent, "total": total, "closed": closed}


def halfclose(port, path, body_file, go):
    body = open(body_file, "rb").read()
    s = socket.create_connection(("127.0.0.1", port), timeout=HANG)
    s.sendall(post(path, [HOST, ("Content-Type", "application/json"),
                          ("Content-Length", str(len(body)))], body))
    end = time.monotonic() + HANG
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.02)
    s.shutdown(socket.SHUT_WR)
    r = parse(*read_to_close(s))
    s.close()
    return r


def noread(port, body_file, go, path="/v1/completions"):
    body = open(body_file, "rb").read()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(HANG)
    s.connect(("127.0.0.1", port))
    s.sendall(post(path, [HOST, ("Content-Type", "application/json"),
                          ("Content-Length", str(len(body)))], body))
    end = time.monotonic() + HANG * 3
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.05)
    data, closed = read_to_close(s)
    s.close()
    text = data.decode("latin-1")
    # The end of the stream is where the error event and [DONE] are.
    return {"status": int(text.split(" ")[1]) if text.startswith("HTTP/1.") else 0,
            "closed": closed, "bytes": len(data), "tail": text[-3000:],
            "data_events": text.count("data: ")}


def finmany(port, n, clients):
    """Request, then shutdown(SHUT_WR) at once, from several threads: the FIN
    races the daemon's handling of the request."""
    import threading
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4}).encode()
    answered = []

    def one():
        ok = 0
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=HANG)
            s.sendall(post("/v1/completions", [HOST, ("Content-Type", "application/json"),
                                               ("Content-Length", str(len(body)))], body))
            s.shutdown(socket.SHUT_WR)
            r = parse(*read_to_close(s))
            s.close()
            ok += r["status"] == 200 and bool(r["json"]) and "choices" in r["json"]
        answered.append(ok)

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"answered": sum(answered), "sent": n * clients}


def main():
    cmd, port, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if cmd == "framing":
        out = framing(port)
    elif cmd == "raw":
        out = raw(port, *args)
    elif cmd == "hold":
        out = hold(port, int(args[0]), args[1], args[2], args[3])
    elif cmd == "drip":
        out = drip(port, int(args[0]))
    elif cmd == "halfclose":
        out = halfclose(port, *args)
    elif cmd == "noread":
        out = noread(port, *args)
    elif cmd == "finmany":
        out = finmany(port, int(args[0]), int(args[1]))
    else:
        raise SystemExit("unknown command " + cmd)
    print(json.dumps(out))


main()
