"""A bounded load test: 32 concurrent streaming clients send a fixed count
of completions to a server whose queue holds 24 (tests/cli/serve_http.toml);
every request gets a complete answer or a 429 with Retry-After, the server
holds no more than max_queue requests, and its memory does not grow from
one wave of requests to the next.

  serve_http_load.py SLICESCHED CONFIG WORKDIR SOURCE_DIR
"""
import json
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

slicesched, config, work, source = sys.argv[1:5]
sys.path.insert(0, os.path.join(source, "scripts"))
import http_load  # noqa: E402

fresh_dir(work)
srv = Server(slicesched, config)
waves = []
for wave in range(3):
    r = http_load.run(srv.url, clients=32, requests=128, prompt_tokens=16, max_tokens=8, model="llama-tiny",
                      vocab=512, seed=wave)
    print(json.dumps(r))
    check(r["errors"] == 0, "wave %d: every request complete or 429 (%s)" % (wave, r["first_error"]), srv)
    check(r["complete"] + r["rejected_429"] == 128 and r["complete"] > 0, "wave %d: 128 answers" % wave, srv)
    _, _, body = srv.get("/metrics")
    text = body.decode()
    admitted = int(re.search(r"^slicesched_http_admitted (\d+)$", text, re.M).group(1))
    check(admitted == 0, "wave %d: nothing left admitted" % wave, srv)
    waves.append(srv.rss_kib())
print("RSS KiB after each wave:", waves)
# The first wave warms up (threads, allocator arenas, LibTorch caches); from
# the second on, a server with bounded state holds the same memory.
check(waves[2] <= waves[1] + 64 * 1024, "memory bounded: %d KiB -> %d KiB" % (waves[1], waves[2]), srv)
check(srv.stop(signal.SIGTERM) == 0, "SIGTERM: exit 0", srv)
print("PASS")
