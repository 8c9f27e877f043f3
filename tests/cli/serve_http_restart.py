"""A restart during a batch job loses no accepted request: a batch is
accepted, the server is killed (SIGKILL: no drain, no goodbye) while the
batch runs (the store then holds answered and pending lines), and a new server on the same store finishes it; the output has
every line exactly once, each with its tokens. Then a drain (SIGTERM)
during a second batch: nothing is answered as failed, and the next start
finishes it.

  serve_http_restart.py SLICESCHED CONFIG WORKDIR
"""
import json
import os
import signal
import sqlite3
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir, wait_batch  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
store = os.path.join(work, "batches.sqlite")
N = 300  # lines: long enough (seconds) that the kill lands in the middle
lines = [
    {"custom_id": "line-%02d-%s" % (i, uuid.uuid4().hex[:6]), "method": "POST", "url": "/v1/completions",
     "body": {"model": "llama-tiny", "prompt": list(range(1, 20 + i % 7)), "max_tokens": 40 + i % 9}}
    for i in range(N)
]
jsonl = "\n".join(json.dumps(x) for x in lines) + "\n"

srv = Server(slicesched, config, store=store)
# One server per store: a second one on it is refused at start, naming the first.
import subprocess  # noqa: E402
second = subprocess.run([slicesched, "serve", config, "--listen", "127.0.0.1:0", "--batch-store", store],
                        capture_output=True, text=True, timeout=120)
lines_2 = [l for l in second.stderr.splitlines() if l.strip()]
check(second.returncode == 2 and len(lines_2) == 1 and lines_2[0].startswith(
    "slicesched: batch store %s is in use by another server (pid %d on " % (store, srv.proc.pid)),
    "a second server on the store is refused naming the first: %s" % lines_2, srv)
boundary = "b0undary"
form = (
    "--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
    "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
    "Content-Type: application/jsonl\r\n\r\n%s\r\n--%s--\r\n" % (boundary, boundary, jsonl, boundary)
).encode()
status, _, body = srv.post("/v1/files", form, "multipart/form-data; boundary=" + boundary)
check(status == 200, "file accepted (%d %s)" % (status, body[:200]), srv)
file_id = json.loads(body)["id"]
status, _, body = srv.post("/v1/batches", {"input_file_id": file_id, "endpoint": "/v1/completions",
                                           "completion_window": "24h"})
check(status == 200, "batch accepted", srv)
batch_id = json.loads(body)["id"]


def get_batch(s):
    st, _, b = s.get("/v1/batches/" + batch_id)
    if st != 200:
        check(False, "GET batch: %d %s" % (st, b[:200]), s)
    return json.loads(b)


while get_batch(srv)["request_counts"]["completed"] < 1:
    time.sleep(0.02)
srv.proc.send_signal(signal.SIGKILL)
srv.proc.wait()
# What the killed server left: answered lines, and pending ones (some of
# them were running when it died).
db = sqlite3.connect(store)
states = dict(db.execute("SELECT state, COUNT(*) FROM lines GROUP BY state").fetchall())
db.close()
print("killed with lines:", states)
check(states.get("done", 0) >= 1 and states.get("pending", 0) >= 1 and sum(states.values()) == N,
      "the kill landed mid-batch: %s" % states)

srv = Server(slicesched, config, store=store)
after = wait_batch(lambda: get_batch(srv), lambda b: b["status"] == "completed", "batch completes")
check(after["request_counts"] == {"total": N, "completed": N, "failed": 0}, "all %d lines completed" % N, srv)
status, _, out = srv.get("/v1/files/%s/content" % after["output_file_id"])
check(status == 200, "output file", srv)
got = [json.loads(x) for x in out.decode().splitlines()]
check(sorted(o["custom_id"] for o in got) == sorted(x["custom_id"] for x in lines), "every line exactly once", srv)
want = {x["custom_id"]: x["body"]["max_tokens"] for x in lines}
check(all(len(o["response"]["body"]["choices"][0]["token_ids"]) == want[o["custom_id"]] for o in got),
      "each line with its tokens", srv)

# A drain (SIGTERM) during a batch job: the lines in the engine finish, the
# rest stay pending (none is answered as failed), and the next start runs them.
status, _, body = srv.post("/v1/batches", {"input_file_id": file_id, "endpoint": "/v1/completions",
                                           "completion_window": "24h"})
check(status == 200, "second batch accepted", srv)
batch_id = json.loads(body)["id"]
while get_batch(srv)["request_counts"]["completed"] < 1:
    time.sleep(0.02)
check(srv.stop(signal.SIGTERM) == 0, "SIGTERM mid-batch: exit 0", srv)
db = sqlite3.connect(store)
states = dict(db.execute("SELECT state, COUNT(*) FROM lines WHERE batch_id = ? GROUP BY state", (batch_id,)).fetchall())
db.close()
print("drained with lines:", states)
check(states.get("failed", 0) == 0 and states.get("pending", 0) >= 1 and sum(states.values()) == N,
      "the drain left pending lines and failed none: %s" % states)
srv = Server(slicesched, config, store=store)
after = wait_batch(lambda: get_batch(srv), lambda b: b["status"] == "completed", "second batch completes")
check(after["request_counts"] == {"total": N, "completed": N, "failed": 0}, "second batch: all lines completed", srv)
check(srv.stop(signal.SIGTERM) == 0, "SIGTERM: exit 0", srv)
print("PASS")
