#!/usr/bin/env python3
"""Memory goes back after large bodies (issue 23, item 9): a server on
tests/cli/serve_http.toml gets 32 requests of 24-50 MB each, four at a
time, every one refused (a text prompt for a model without a tokenizer: the
whole body is read and parsed first); a second later its resident memory is
within 10 % of what it was before them (it rose to about 1.4 GB and stayed
there before the server trimmed its allocator after large bodies).

  serve_http_rss.py SLICESCHED CONFIG WORKDIR
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
srv = Server(slicesched, config)
for _ in range(8):  # warm: threads, arenas, LibTorch
    status, _, _ = srv.post("/v1/completions", {"model": "llama-tiny", "prompt": [1, 2, 3], "max_tokens": 4})
    check(status == 200, "a warm-up completion", srv)
time.sleep(0.5)
before = srv.rss_kib()
peak = [before]
statuses = []
lock = threading.Lock()


def client(sizes):
    for mb in sizes:
        body = json.dumps({"model": "llama-tiny", "prompt": "x" * (mb << 20), "max_tokens": 4})
        status, _, _ = srv.post("/v1/completions", body)
        with lock:
            statuses.append(status)
            peak[0] = max(peak[0], srv.rss_kib())


sizes = [24 + (i * 7) % 27 for i in range(32)]  # 24..50 MB
threads = [threading.Thread(target=client, args=(sizes[i::4],)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(statuses.count(400) == 32, "32 large bodies refused with 400 (%s)" % sorted(set(statuses)), srv)
time.sleep(1.0)
after = srv.rss_kib()
print(f"RSS: {before / 1024:.0f} MiB before, {peak[0] / 1024:.0f} MiB at the peak, {after / 1024:.0f} MiB after "
      f"({sum(sizes)} MB of bodies)")
# Under AddressSanitizer (make sanitize) freed memory sits in its quarantine
# and its allocator is not glibc's: RSS says nothing there, so the bound is
# checked only in the plain build (make test).
if os.environ.get("ASAN_OPTIONS") is None:
    check(after <= before * 1.10, f"RSS back within 10 %: {after} KiB against {before} KiB", srv)
else:
    print("RSS bound not checked under AddressSanitizer (its quarantine holds freed memory)")
status, _, _ = srv.post("/v1/completions", {"model": "llama-tiny", "prompt": [1, 2, 3], "max_tokens": 4})
check(status == 200, "still serving", srv)
check(srv.stop() == 0, "SIGTERM: exit 0", srv)
print("PASS")
