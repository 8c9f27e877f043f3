#!/usr/bin/env python3
"""A short request is not stuck behind a long prompt (issue 23, item 8's
Show), end to end on tests/cli/serve_http.toml with the chat tenant's
chunked prefill on (token_budget = TOKEN_BUDGET) and two lanes:

  - the 3-token request's TTFT alone: the median of SAMPLES, one after
    another, on the idle server;
  - its TTFT beside a 20,000-token prompt that is prefilling: the median of
    SAMPLES sent one after another while the long prefill is under way
    (checked: the long prompt has no token yet when the last one is done);
  - beside <= max(2 x alone, alone + FLOOR_MS).

Why two lanes: an iteration is never preempted (paper 4.4), and a chunk of
64 tokens at 10-20k tokens of context takes 40-50 ms on this CPU (attention
grows with the context). With one lane a short request waits for the chunk
iteration in flight, then shares the next one with the next chunk: 143 ms
beside against 19 ms alone here (it fails this test). With a second lane it
starts at once in its own iteration, and the what-if places it on the
accelerator the chunks leave idle.

The floor: alone is about 1 ms with the tiny model, where one CFS time
slice of a thread of this server on a loaded 2-core machine (every
accelerator, HTTP and engine thread shares two cores, and ctest runs other
tests beside) is several ms. FLOOR_MS = 5 keeps the check to the ratio where
the times are large enough to compare, and still fails one lane's 143 ms.

  serve_http_ttft.py SLICESCHED CONFIG WORKDIR
"""
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir, stream_completion  # noqa: E402

TOKEN_BUDGET = 64
LONG = 20_000
SAMPLES = 7
FLOOR_MS = 5.0

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
base = open(config).read()
chat = 'name = "chat"\n'
assert chat in base
path = os.path.join(work, "chunked.toml")
open(path, "w").write(base.replace(chat, chat + f"token_budget = {TOKEN_BUDGET}\nchunked_prefill = true\nlanes = 2\n"))


def prompt(n, seed):
    return [1 + (seed + 7 * i) % 500 for i in range(n)]


srv = Server(slicesched, path)
port = int(srv.url.rsplit(":", 1)[1])
short = prompt(3, 1)
for _ in range(5):  # warm-up (the first iterations allocate, the estimators learn)
    stream_completion(port, short, 1)
alone = []
for _ in range(SAMPLES):
    t0, first, tokens = stream_completion(port, short, 1)
    check(len(tokens) == 1, "the short request alone gets its token")
    alone.append((first - t0) * 1000)

# The long prompt: its first token must not come while the short ones are
# measured (then they were beside its prefill); the test does not wait for
# the rest of it (about 20 s alone on a quiet 2-core machine, minutes on a
# loaded one), it hangs up, which cancels it.
long_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
long_out = {}


def long_stream():
    body = json.dumps({"model": "llama-tiny", "prompt": prompt(LONG, 5), "max_tokens": 1, "stream": True})
    long_out["sent"] = time.monotonic()
    long_conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    try:
        resp = long_conn.getresponse()
        while True:
            line = resp.fp.readline()
            if not line or line.startswith(b"data: [DONE]"):
                break
            if line.startswith(b"data: {") and b"token_ids" in line:
                long_out.setdefault("first", time.monotonic())
    except OSError:
        pass  # hung up below


long_t = threading.Thread(target=long_stream)
long_t.start()
time.sleep(0.5)  # the long prefill is under way
beside = []
for _ in range(SAMPLES):
    t0, first, tokens = stream_completion(port, short, 1)
    check(len(tokens) == 1, "the short request beside the long prompt gets its token")
    beside.append((first - t0) * 1000)
check("first" not in long_out, "every short request beside was served while the long prompt prefilled", srv)
long_conn.sock.shutdown(socket.SHUT_RDWR)
long_t.join()
check(srv.stop() == 0, "SIGTERM exits 0 (the long request cancelled by its hang-up)", srv)
a, b = statistics.median(alone), statistics.median(beside)
print(f"TTFT of a 3-token request alone: median {a:.2f} ms ({', '.join(f'{x:.1f}' for x in alone)}); "
      f"beside a {LONG:,}-token prompt prefilling in chunks of {TOKEN_BUDGET}: median {b:.2f} ms "
      f"({', '.join(f'{x:.1f}' for x in beside)}); ratio {b / a:.2f}")
check(b <= max(2 * a, a + FLOOR_MS),
      f"beside ({b:.2f} ms) <= max(2 x alone, alone + {FLOOR_MS:.0f} ms) ({max(2 * a, a + FLOOR_MS):.2f} ms)")
print("PASS")
