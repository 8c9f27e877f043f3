#!/usr/bin/env python3
"""Drives the bad-HTTP-input table of docs/reliability.md against one
server (tests/cli/serve_http.toml, no batch store): every row's request must
get the row's status with OpenAI's error body, whose message reads as the
table says ("..." stands for anything), and the server must keep serving.

    bad_http.py SLICESCHED SOURCE_DIR WORK_DIR

Rows sit between <!-- bad-http --> and <!-- /bad-http -->:
| what a careless client sends | `METHOD PATH [BODY]` | `STATUS message` |
In the request, {x*N} stands for N copies of x, and a body written
<Content-Length N, no body> sends only that header. A body may start with
<no Content-Length> (sent without one, the connection left open) or
<header NAME: VALUE> (one more header line), then the body.
"""
import json
import os
import re
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check  # noqa: E402


def rows(doc):
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"<!-- bad-http -->(.*?)<!-- /bad-http -->", text, re.S)
    if not m:
        sys.exit(f"{doc}: no <!-- bad-http --> table")
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        yield cells[0], cells[1].strip("`").replace("\\|", "|"), cells[2].strip("`").replace("\\|", "|")


def expand(s):
    return re.sub(r"\{(.)\*(\d+)\}", lambda m: m.group(1) * int(m.group(2)), s)


def request_bytes(spec):
    method, path, *rest = spec.split(" ", 2)
    body = rest[0] if rest else None
    head = f"{method} {expand(path)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    m = re.fullmatch(r"<Content-Length (-?\d+), no body>", body or "")
    if m:
        return (head + f"Content-Type: application/json\r\nContent-Length: {m.group(1)}\r\n\r\n").encode()
    if body is None:
        return (head + "\r\n").encode()
    length = True
    while True:
        m = re.match(r"<no Content-Length> ?(.*)", body, re.S)
        if m:
            length, body = False, m.group(1)
            continue
        m = re.match(r"<header ([^>]*)> ?(.*)", body, re.S)
        if m:
            head, body = head + m.group(1) + "\r\n", m.group(2)
            continue
        break
    data = expand(body).encode()
    sized = f"Content-Length: {len(data)}\r\n" if length else ""
    return (head + f"Content-Type: application/json\r\n{sized}\r\n").encode() + data


def read_to_close(s):
    """What the server sends on socket s until it closes (or resets, or times out); s is closed."""
    resp = b""
    try:
        while chunk := s.recv(65536):
            resp += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return resp


def matches(line, expected):
    pos = 0
    for piece in expected.split("..."):
        at = line.find(piece, pos)
        if at < 0:
            return False
        pos = at + len(piece)
    return True


def main():  # noqa: C901
    slicesched, source, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "out")
    srv = Server(slicesched, os.path.join(source, "tests", "cli", "serve_http.toml"), out=out)
    port = int(srv.url.rsplit(":", 1)[1])
    failures, count = [], 0
    for what, spec, expected in rows(os.path.join(source, "docs", "reliability.md")):
        count += 1
        want_status, want_message = expected.split(" ", 1)
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(request_bytes(spec))
        resp = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                resp += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        s.close()
        head, _, body = resp.partition(b"\r\n\r\n")
        m = re.match(rb"HTTP/1\.1 (\d+)", head)
        status = int(m.group(1)) if m else None
        try:
            err = json.loads(body)["error"]
            message = err["message"]
            problem = None if isinstance(err.get("type"), str) else "no error type"
        except (ValueError, KeyError, TypeError):
            message, problem = body[:300], "not an OpenAI error body"
        if problem is None and status != int(want_status):
            problem = f"status {status}, expected {want_status}"
        if problem is None and ("\n" in message or not matches(message, want_message)):
            problem = f"got {message!r}, expected {want_message!r}"
        if problem:
            failures.append(f"{what} ({spec[:80]}): {problem}")
    # A client that half-closes after its request has hung up: its
    # completion is cancelled and nothing is written, never a 200 without
    # a body.
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = b'{"model": "llama-tiny", "prompt": [1, 2, 3], "max_tokens": 40}'
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    s.shutdown(socket.SHUT_WR)
    resp = read_to_close(s)
    head, _, body = resp.partition(b"\r\n\r\n")
    check(not resp or (head.startswith(b"HTTP/1.1 200") and b'"token_ids"' in body),
          f"a half-closed client gets nothing or a whole reply, not {resp[:120]!r}", srv)
    # Content-Length and Transfer-Encoding together, and a second request
    # behind: one answer, then the connection closes (RFC 9112 6.1), never
    # an answer to what rode in the body (an outside probe got a 200 for it).
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    resp = read_to_close(s)
    check(resp.startswith(b"HTTP/1.1 400") and resp.count(b"HTTP/1.1 ") == 1,
          f"a smuggled request behind Content-Length + Transfer-Encoding is not answered ({resp.count(b'HTTP/1.1 ')} "
          f"answers: {resp[:80]!r})", srv)
    status, _, body = srv.get("/v1/models")
    check(status == 200 and json.loads(body)["data"][0]["id"] == "llama-tiny",
          "the server still answers after every bad input", srv)
    check(srv.stop() == 0, "SIGTERM: exit 0", srv)
    # No completion ran: the summary and its plots are written all the same.
    check("gnuplot failed" not in srv.log() and os.path.exists(os.path.join(out, "summary.json")),
          "--out with no online request: summary.json, and no 'gnuplot failed'", srv)
    for f in failures:
        print("FAIL", f)
    print(f"bad-HTTP table: {count - len(failures)} passed, {len(failures)} failed")
    if count < 10:
        sys.exit("the table has fewer than 10 rows: is it still there?")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
