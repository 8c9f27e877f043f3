#!/usr/bin/env python3
"""Health under the config's own [[faults]] (issue 23, item 3), end to end:
serve --listen on tests/cli/serve_faults_health.toml, in-process CPU
accelerators (tiny-a on c0, tiny-b on c1), faults on the run's clock.

  1. before 2 s: /health ok, /health/ready ready, both models answer;
  2. c0 lost (2 s to 4 s): /health/ready 503 naming tiny-a and c0 and when
     c0 is due back, with Retry-After; /health 200, a tiny-a completion 503
     with the reason and Retry-After (1 or 2 s), tiny-b still 200;
  3. c0 back (4 s): ready again, tiny-a answers;
  4. c1 lost for good (6 s): not ready, naming tiny-b;
  5. c0 lost for good (7 s): every accelerator is lost, serve stops, its
     last line says so, with a non-zero exit.

  serve_faults_health.py SLICESCHED CONFIG WORKDIR
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
srv = Server(slicesched, config)


def completion(model):
    status, _, body = srv.post("/v1/completions", {"model": model, "prompt": [1, 2, 3], "max_tokens": 4})
    return status, json.loads(body)


def health(path):
    status, _, body = srv.get(path)
    return status, json.loads(body)


def wait_for(cond, what, limit=15):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise SystemExit(f"FAIL: {what} within {limit} s\n" + srv.log())


down_a = re.compile(r"model 'tiny-a' cannot be served: every accelerator holding it is lost \(c0\); c0 is due back "
                    r"in ([12]) s \(its \[\[faults\]\] duration_s\)")
down_b = "model 'tiny-b' cannot be served: every accelerator holding it is lost for good (c1)"

# 1. Healthy (the first fault is 2 s into the run; the server printed its
# address after loading, so well before).
check(health("/health") == (200, {"status": "ok"}), "/health: ok", srv)
check(health("/health/ready") == (200, {"status": "ready"}), "/health/ready: ready", srv)
for m in ("tiny-a", "tiny-b"):
    status, body = completion(m)
    check(status == 200 and len(body["choices"][0]["token_ids"]) == 4, f"{m} answers", srv)

# 2. c0 lost.
wait_for(lambda: health("/health/ready")[0] == 503, "/health/ready turning 503 after c0's fault")
status, headers, raw = srv.get("/health/ready")
body = json.loads(raw)
due = down_a.fullmatch(body.get("reason", ""))
check(status == 503 and body["status"] == "not_ready" and due and headers.get("Retry-After") == due[1],
      f"/health/ready with c0 lost: {body} {headers}", srv)
check(health("/health") == (200, {"status": "ok"}), "/health with c0 lost: ok (tiny-b can be served)", srv)
status, headers, raw = srv.post("/v1/completions", {"model": "tiny-a", "prompt": [1, 2, 3], "max_tokens": 4})
body = json.loads(raw)
due = down_a.fullmatch(body["error"]["message"])
check(status == 503 and due and headers.get("Retry-After") == due[1] and body["error"]["code"] == "model_unavailable",
      f"tiny-a with c0 lost: {status} {body} {headers}", srv)
check(completion("tiny-b")[0] == 200, "tiny-b with c0 lost: 200", srv)

# 3. c0 back.
wait_for(lambda: health("/health/ready")[0] == 200, "/health/ready ready again when c0's fault ends")
status, body = completion("tiny-a")
check(status == 200 and len(body["choices"][0]["token_ids"]) == 4, f"tiny-a with c0 back: {status}", srv)

# 4. c1 lost for good.
wait_for(lambda: health("/health/ready")[1].get("reason") == down_b, "/health/ready naming tiny-b after c1's fault")
status, headers, _ = srv.post("/v1/completions", {"model": "tiny-b", "prompt": [1, 2, 3], "max_tokens": 4})
check(status == 503 and "Retry-After" not in headers, f"tiny-b with c1 lost for good: 503 without Retry-After {headers}",
      srv)
check(srv.proc.poll() is None, "serve still runs with c0 left", srv)

# 5. c0 lost too: nothing left.
try:
    rc = srv.proc.wait(timeout=20)
except Exception:
    raise SystemExit("FAIL: serve still runs after losing every accelerator\n" + srv.log())
srv._reader.join(timeout=10)
lines = [l for l in srv.log().splitlines() if l.strip()]
print("serve exited", rc, "saying:", lines[-1])
check(rc != 0, "losing every accelerator: a non-zero exit", srv)
check("every accelerator is lost (c1 at " in lines[-1] and ", c0 at " in lines[-1] and lines[-1].count("c0") == 1 and
      lines[-1].endswith("); nothing is left to run on"), "its last line says every accelerator is lost", srv)
print("PASS")
