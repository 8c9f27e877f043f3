#!/usr/bin/env python3
"""Requests that can be cancelled (issue 23, item 5), end to end, on
tests/cli/serve_http.toml with [serve] drain_timeout_s = 3:

  - four streamed 20,000-token requests whose clients close after a few
    tokens end at once: their admission slots are free within 2 s, the
    summary's requests CSV says "cancelled: the client went away" with far
    fewer than 20,000 tokens generated (their sequences left the batch),
    and another stream's time per output token is back to what it was alone
    (at most twice, measured in this run);
  - a non-streamed request whose client hangs up ends the same way;
  - SIGTERM with a 20,000-token stream and a non-streamed request still
    running: the drain waits drain_timeout_s, cancels both, counts them on
    one line, and exits 0; the non-streamed one gets 503 with Retry-After.

  serve_http_cancel.py SLICESCHED CONFIG WORKDIR
"""
import csv
import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
cfg = os.path.join(work, "cancel.toml")
open(cfg, "w").write(open(config).read().replace("batch_inflight = 4\n", "batch_inflight = 4\ndrain_timeout_s = 3\n"))
out = os.path.join(work, "out")
srv = Server(slicesched, cfg, out=out)
host, port = "127.0.0.1", int(srv.url.rsplit(":", 1)[1])
LONG = 20000


def open_stream(max_tokens):
    conn = http.client.HTTPConnection(host, port, timeout=120)
    conn.request("POST", "/v1/completions",
                 body=json.dumps({"model": "llama-tiny", "prompt": [1, 2, 3, 4], "max_tokens": max_tokens,
                                  "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    check(resp.status == 200, f"a stream of {max_tokens} opens", srv)
    return conn, resp


def read_tokens(resp, n):
    """Reads n token events; returns their arrival times."""
    times = []
    while len(times) < n:
        line = resp.fp.readline()
        if not line:
            break
        if line.startswith(b"data: {") and b'"token_ids":[' in line:
            times.append(time.monotonic())
    return times


def tpot(max_tokens=64):
    conn, resp = open_stream(max_tokens)
    times = read_tokens(resp, max_tokens)
    conn.close()
    check(len(times) == max_tokens, f"a {max_tokens}-token stream completes", srv)
    return (times[-1] - times[0]) / (len(times) - 1)


def admitted():
    _, _, body = srv.get("/metrics")
    return int(re.search(r"^slicesched_http_admitted (\d+)$", body.decode(), re.M).group(1))


def wait_admitted_zero(what, within=2.0):
    t0 = time.monotonic()
    while admitted() != 0 and time.monotonic() - t0 < within + 5:
        time.sleep(0.05)
    took = time.monotonic() - t0
    check(admitted() == 0 and took <= within, f"{what}: every slot free after {took:.2f} s", srv)


alone = tpot()
print(f"TPOT alone: {alone * 1000:.2f} ms")
streams = [open_stream(LONG) for _ in range(4)]
for conn, resp in streams:
    check(len(read_tokens(resp, 5)) == 5, "a long stream sends tokens", srv)
check(admitted() == 4, "four long streams admitted", srv)
for conn, resp in streams:  # the clients go away
    resp.close()
    conn.close()
wait_admitted_zero("four abandoned streams")
after = tpot()
print(f"TPOT after the abandoned streams: {after * 1000:.2f} ms")
check(after <= 2 * alone + 0.002, f"TPOT back to normal: {after * 1000:.2f} ms against {alone * 1000:.2f} ms alone", srv)

# A non-streamed request whose client hangs up.
s = socket.create_connection((host, port))
body = json.dumps({"model": "llama-tiny", "prompt": [1, 2, 3], "max_tokens": LONG}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
          % len(body) + body)
time.sleep(0.5)
check(admitted() == 1, "a long non-streamed request admitted", srv)
s.close()
wait_admitted_zero("an abandoned non-streamed request")

# The drain's deadline, with a stream and a non-streamed request running.
conn, resp = open_stream(LONG)
read_tokens(resp, 3)
plain = {}


def plain_request():
    c = http.client.HTTPConnection(host, port, timeout=120)
    c.request("POST", "/v1/completions", body=json.dumps({"model": "llama-tiny", "prompt": [2, 7], "max_tokens": LONG}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    plain.update(status=r.status, retry=r.getheader("Retry-After"), body=json.loads(r.read()))


waiter = threading.Thread(target=plain_request)
waiter.start()
t_wait = time.monotonic()
while admitted() != 2 and time.monotonic() - t_wait < 10:
    time.sleep(0.05)
check(admitted() == 2, "the non-streamed request admitted beside the stream", srv)
t0 = time.monotonic()
srv.proc.send_signal(signal.SIGTERM)
rc = srv.proc.wait(timeout=60)
took = time.monotonic() - t0
srv._reader.join(timeout=10)
waiter.join(timeout=10)
log = srv.log()
# Cut short by the shutdown: 503 (another replica can take it), not 500.
check(plain.get("status") == 503 and plain.get("retry") == "1" and
      plain["body"]["error"]["message"] == "cancelled: the server stopped before the request finished",
      f"a non-streamed request the drain cancelled: 503 with Retry-After ({plain})", srv)
print(f"SIGTERM with a long stream running: exit {rc} after {took:.1f} s")
check(rc == 0, "the drain's deadline: exit 0", srv)
check(3 <= took <= 15, f"the drain ended at its deadline ({took:.1f} s, drain_timeout_s 3)", srv)
check("slicesched: the drain took longer than 3 s ([serve] drain_timeout_s): 2 unfinished request(s) cancelled"
      in log, "the cancelled request is counted on one line", srv)
conn.close()

# summary.json's offered load is what the clients sent (9 completions), not
# the config's streams, which a server never replays.
offered = json.load(open(os.path.join(out, "summary.json")))["policies"]["SliceScheduler"]["offered"]
print("offered:", offered)
check(offered["chat"]["requests"] == 9 and offered["batch"]["requests"] == 0,
      "summary.json offers what the clients sent", srv)

rows = list(csv.DictReader(open(os.path.join(out, "requests_slicescheduler.csv"))))
gone = [r for r in rows if r["error"] == "cancelled: the client went away"]
print("abandoned requests (generated tokens):", [int(r["generated"]) for r in gone])
check(len(gone) == 5 and all(int(r["generated"]) < LONG // 4 for r in gone),
      "five requests ended abandoned, far short of their 20,000 tokens", srv)
print("PASS")
