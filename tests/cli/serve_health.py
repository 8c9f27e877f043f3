#!/usr/bin/env python3
"""Health that tells the truth (issue 23, item 2), end to end:
serve --spawn-local --listen on tests/cli/serve_health.toml (tiny-a on
executor a's one accelerator, tiny-b on b's).

  1. /health and /health/ready say ok and ready; both models answer.
  2. executor a killed (SIGKILL): /health/ready turns 503 naming tiny-a
     and its lost accelerator, /health stays 200 (tiny-b can be served),
     a completion for tiny-a gets 503 with the reason (not a 500, and the
     server does not exit), one for tiny-b still 200.
  3. executor b killed too: serve stops with a non-zero exit, its last
     line saying every accelerator is lost.

  serve_health.py SLICESCHED CONFIG WORKDIR
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
srv = Server(slicesched, config, extra=["--spawn-local"])


def completion(model):
    status, _, body = srv.post("/v1/completions", {"model": model, "prompt": [1, 2, 3], "max_tokens": 4})
    return status, json.loads(body)


def executor(host):
    with open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children") as f:
        for pid in f.read().split():
            cmd = open(f"/proc/{pid}/cmdline").read().split("\0")
            if "--host" in cmd and cmd[cmd.index("--host") + 1] == host:
                return int(pid)
    raise SystemExit(f"FAIL: no executor child for host {host}")


def health(path):
    status, _, body = srv.get(path)
    return status, json.loads(body)


check(health("/health") == (200, {"status": "ok"}), "/health: ok", srv)
check(health("/health/ready") == (200, {"status": "ready"}), "/health/ready: ready", srv)
for m in ("tiny-a", "tiny-b"):
    status, body = completion(m)
    check(status == 200 and len(body["choices"][0]["token_ids"]) == 4, f"{m} answers", srv)

os.kill(executor("a"), signal.SIGKILL)
deadline = time.monotonic() + 20
while time.monotonic() < deadline and health("/health/ready")[0] == 200:
    time.sleep(0.1)
status, body = health("/health/ready")
want = "model 'tiny-a' cannot be served: every accelerator holding it is lost for good (a0)"
check(status == 503 and body == {"status": "not_ready", "reason": want}, f"/health/ready after a: {status} {body}", srv)
check(health("/health") == (200, {"status": "ok"}), "/health after a: ok (tiny-b can be served)", srv)
status, headers, raw = srv.post("/v1/completions", {"model": "tiny-a", "prompt": [1, 2, 3], "max_tokens": 4})
body = json.loads(raw)
check("Retry-After" not in headers, f"no Retry-After for an executor lost for good: {headers}", srv)
check(status == 503 and body["error"]["message"] == want and body["error"]["code"] == "model_unavailable",
      f"tiny-a after a: {status} {body}", srv)
status, body = completion("tiny-b")
check(status == 200, "tiny-b after a: 200", srv)
check(srv.proc.poll() is None, "serve still runs", srv)

os.kill(executor("b"), signal.SIGKILL)
try:
    rc = srv.proc.wait(timeout=30)
except Exception:
    raise SystemExit("FAIL: serve still runs 30 s after losing every accelerator\n" + srv.log())
srv._reader.join(timeout=10)
lines = [l for l in srv.log().splitlines() if l.strip()]
print("serve exited", rc, "saying:", lines[-1])
check(rc != 0, "losing every accelerator: a non-zero exit", srv)
check(lines[-1].startswith("slicesched: policy 'SliceScheduler' (placement 'simulation-guided'): every accelerator is "
                           "lost (a0 at ") and
      lines[-1].endswith("); nothing is left to run on") and ", b0 at " in lines[-1],
      "its last line says every accelerator is lost", srv)
print("PASS")
