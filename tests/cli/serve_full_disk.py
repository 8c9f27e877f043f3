#!/usr/bin/env python3
"""A full disk under the batch store (issue 23, item 6), end to end: the
store lives on a 16 MiB tmpfs (its WAL alone grows to 4 MiB
before SQLite checkpoints it); a 200-line batch is accepted, then the disk is
filled. The batch pauses: it stays in_progress with an error saying why,
the store is tried a few times (back-off), the server's CPU stays low (no
hot loop), and no line runs twice. Once room is made the batch completes,
every line exactly once, and SIGTERM exits 0.

Where tmpfs cannot be mounted (not root, no CAP_SYS_ADMIN) it says why and
exits 77 (ctest: skipped); tests/serving's "batch runner: a full disk"
injects the same failure through SQLite's max_page_count.

  serve_full_disk.py SLICESCHED CONFIG WORKDIR
"""
import json
import os
import re
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, tmpfs_or_skip  # noqa: E402

slicesched, config, work = sys.argv[1:4]
disk = tmpfs_or_skip(work, "16m")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


srv = None
try:
    store = os.path.join(disk, "batches.sqlite")
    srv = Server(slicesched, config, store=store)
    N = 200
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": "llama-tiny", "prompt": [1, 2, 3, 4 + i % 50], "max_tokens": 24}} for i in range(N)]
    jsonl = "\n".join(json.dumps(x) for x in lines) + "\n"
    b = "b0undary"
    form = (f"--{b}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{b}\r\n"
            f"Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
            f"Content-Type: application/jsonl\r\n\r\n{jsonl}\r\n--{b}--\r\n").encode()
    # The disk is filled first, leaving room for the upload and the batch
    # (their own pages), then the rest goes: results have nowhere to go.
    filler = os.path.join(disk, "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                pass
        except OSError:
            pass
    os.truncate(filler, max(0, os.path.getsize(filler) - 640 * 1024))
    status, _, body = srv.post("/v1/files", form, "multipart/form-data; boundary=" + b)
    check(status == 200, f"batch file accepted ({status} {body[:200]})", srv)
    status, _, body = srv.post("/v1/batches", {"input_file_id": json.loads(body)["id"],
                                               "endpoint": "/v1/completions", "completion_window": "24h"})
    check(status == 200, f"batch accepted ({status} {body[:200]})", srv)
    batch = json.loads(body)["id"]
    with open(filler, "ab", buffering=0) as f:  # now the disk is full
        try:
            while True:
                f.write(b"\0" * 4096)
                pass
        except OSError:
            pass

    def metric(name):
        _, _, text = srv.get("/metrics")
        return int(re.search(r"^%s (\d+)$" % name, text.decode(), re.M).group(1))

    t0 = time.monotonic()
    while metric("slicesched_batch_results_unwritten") == 0 and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    check(metric("slicesched_batch_results_unwritten") > 0, "results the full disk refused are kept", srv)
    failed0, cpu0 = metric("slicesched_batch_store_failed_writes_total"), cpu_s(srv.proc.pid)
    time.sleep(4.0)
    failed1, cpu1 = metric("slicesched_batch_store_failed_writes_total"), cpu_s(srv.proc.pid)
    _, _, body = srv.get("/v1/batches/" + batch)
    info = json.loads(body)
    print(f"while full: {failed1 - failed0} more failed writes and {cpu1 - cpu0:.2f} s of CPU in 4 s; "
          f"batch {info['status']}, {info['request_counts']}, errors {info['errors']}")
    check(failed1 - failed0 <= 4, "the store is tried with back-off, not in a loop", srv)
    check(cpu1 - cpu0 < 1.0, "no hot loop: under 1 s of CPU in 4 s", srv)
    check(info["status"] == "in_progress" and info["errors"]["data"][0]["code"] == "store_write_failed" and
          "disk is full" in info["errors"]["data"][0]["message"], "the batch says it is paused, and why", srv)
    check("slicesched: batch store " in srv.log() and "no new batch line starts meanwhile" in srv.log(),
          "serve said so, once", srv)

    os.remove(filler)  # room again
    t0 = time.monotonic()
    while time.monotonic() - t0 < 90:
        _, _, body = srv.get("/v1/batches/" + batch)
        info = json.loads(body)
        if info["status"] == "completed":
            break
        time.sleep(0.2)
    check(info["status"] == "completed" and info["request_counts"] == {"total": N, "completed": N, "failed": 0},
          f"with room again the batch completes: {info['request_counts']}", srv)
    status, _, out = srv.get(f"/v1/files/{info['output_file_id']}/content")
    got = sorted(json.loads(x)["custom_id"] for x in out.decode().splitlines())
    check(got == sorted(x["custom_id"] for x in lines), "every line exactly once", srv)
    check("takes writes again" in srv.log(), "serve said the store takes writes again", srv)

    # Full again under a second batch, then SIGTERM: the results it could
    # not write are counted on one line, a non-zero exit (it said nothing
    # and exited 2 before), and their lines stay pending.
    # The WAL keeps its size after the first batch: up to 4 MiB of slack the
    # next results would fill without a new block on disk. A TRUNCATE
    # checkpoint (from this process: SQLite takes several connections) takes
    # that slack away, so the second batch's results need the disk. Then,
    # as above: the disk filled but for room for the batch's own rows, the
    # batch sent, the rest filled. Should a checkpoint find the store busy,
    # the next batch tries again.
    failed_before = metric("slicesched_batch_store_failed_writes_total")
    for attempt in range(8):
        try:
            con = sqlite3.connect(store, timeout=10)
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            con.close()
        except sqlite3.OperationalError as e:  # busy, or no room to checkpoint into
            print(f"checkpoint before batch {attempt + 2}: {e}")
        with open(filler, "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        os.truncate(filler, max(0, os.path.getsize(filler) - 640 * 1024))
        status, _, body = srv.post("/v1/batches", {"input_file_id": info["input_file_id"],
                                                   "endpoint": "/v1/completions", "completion_window": "24h"})
        check(status == 200, f"batch {attempt + 2} accepted", srv)
        with open(filler, "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        t0 = time.monotonic()
        batch_id = json.loads(body)["id"]
        while metric("slicesched_batch_results_unwritten") == 0 and time.monotonic() - t0 < 60:
            _, _, b = srv.get(f"/v1/batches/{batch_id}")
            if json.loads(b)["status"] == "completed":
                break
            time.sleep(0.1)
        if metric("slicesched_batch_store_failed_writes_total") > failed_before:
            break
    print(f"full again after {attempt + 1} batch(es)")
    check(metric("slicesched_batch_store_failed_writes_total") > failed_before, "the disk is full again", srv)
    rc = srv.stop()
    last = [l for l in srv.log().splitlines() if l.strip()][-1]
    print(f"SIGTERM while full: exit {rc}: {last}")
    check(rc != 0 and re.fullmatch(r"slicesched: \d+ batch result\(s\) could not be written, and their lines stay "
                                   r"pending \(they run again after a restart\): batch store .*: database or disk is "
                                   r"full", last) is not None, "SIGTERM while full: one line, a non-zero exit", srv)
    srv = None
    print("PASS")
finally:
    if srv is not None and srv.proc.poll() is None:
        srv.proc.kill()
        srv.proc.wait()
    subprocess.run(["umount", disk], capture_output=True)
