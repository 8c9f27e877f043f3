"""A bounded load test: 32 concurrent streaming clients send a fixed count
of completions to a server whose queue holds 24 (tests/cli/serve_http.toml);
every request gets a complete answer or a 429 with Retry-After, the server
holds no more than max_queue requests, and its memory grows by no more than
8 KiB per completed request after a warm-up wave.

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
# Backpressure: 32 clients against a queue of 24, three waves.
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

# Memory per request: 16 clients (under the queue, so every request runs to
# its end) in waves of 256. The first wave warms up (threads, allocator
# arenas, LibTorch caches); from there on, what the server keeps per request
# is its record for the summary (docs/serving.md: about 0.1 to 1 KB). The
# bound, 8 KiB per completed request, is eight times that and well under
# what a leak of a request's buffers would add (a 100 KB leak per request
# reads as about 100 KiB here); wave-to-wave noise measured about 0.3 MB.
KIB_PER_REQUEST = 8
rss, completed = [], []
for wave in range(4):
    r = http_load.run(srv.url, clients=16, requests=256, prompt_tokens=16, max_tokens=8, model="llama-tiny",
                      vocab=512, seed=10 + wave)
    check(r["errors"] == 0 and r["rejected_429"] == 0 and r["complete"] == 256,
          "memory wave %d: all 256 complete (%s)" % (wave, json.dumps(r)), srv)
    rss.append(srv.rss_kib())
    completed.append(r["complete"])
print("RSS KiB after each memory wave:", rss)
grown = rss[-1] - rss[0]
served = sum(completed[1:])
per_request = grown / served
print("growth after warm-up: %d KiB over %d requests = %.2f KiB per request" % (grown, served, per_request))
# Under AddressSanitizer (make sanitize) freed memory sits in its
# quarantine: RSS says nothing there, so the bound is checked only in the
# plain build (make test).
if os.environ.get("ASAN_OPTIONS") is None:
    check(per_request <= KIB_PER_REQUEST,
          "memory per request %.2f KiB <= %d KiB (RSS %d -> %d KiB over %d requests)"
          % (per_request, KIB_PER_REQUEST, rss[0], rss[-1], served), srv)
else:
    print("memory bound not checked under AddressSanitizer (its quarantine holds freed memory)")
check(srv.stop(signal.SIGTERM) == 0, "SIGTERM: exit 0", srv)
print("PASS")
