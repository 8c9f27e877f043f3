#!/usr/bin/env python3
"""serve and its executors agree on what they serve, and an executor serves
one scheduler at a time (issue 23, items 1 and 2).

configs/live/tiny-multiprocess.toml on free TCP ports, executors a, b and c
started by hand as a user would:
  1. executor a from a copy of the config that adds `vocab = 1024`, then
     `weights_seed = 8`, then `layers = 8`, then sets executor_timeout_ms =
     1000: serve is refused with one line naming that field (models[0].vocab,
     models[0].weights, models[0].layers, live.executor_timeout_ms)
     and exits 2; executors b and c, which had accepted the hello, are told
     the scheduler left and keep serving (the next run reuses them).
  2. a second serve while a first runs is refused with one line naming the
     first (its pid); the first loses nothing and exits 0 with every
     request done.
  3. an executor asked to listen on port 99999 is refused before it loads
     anything.
Usage: executor_handshake.py SLICESCHED SRC OUT
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

S, SRC, OUT = sys.argv[1:4]
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)


def fail(msg, *logs):
    print("FAIL:", msg)
    for p in logs:
        if os.path.exists(p):
            print(f"--- {p}:\n" + open(p).read())
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ports = {h: free_port() for h in "abc"}
base = open(os.path.join(SRC, "configs/live/tiny-multiprocess.toml")).read()
for h, old in zip("abc", (5701, 5702, 5703)):
    base = base.replace(f"tcp://127.0.0.1:{old}", f"tcp://127.0.0.1:{ports[h]}")
# A first serve that runs long enough for a second to try (20 s of arrivals).
base = base.replace("duration_s = 6", "duration_s = 20")
cfg = os.path.join(OUT, "mp.toml")
open(cfg, "w").write(base)

procs = []


def start_executor(host, config):
    log = open(os.path.join(OUT, f"exec-{host}.log"), "a")
    p = subprocess.Popen([S, "executor", "--listen", f"tcp://127.0.0.1:{ports[host]}", "--config", config,
                          "--host", host], stderr=log, stdout=log)
    procs.append(p)
    return p


def wait_listening(host, p):
    path = os.path.join(OUT, f"exec-{host}.log")
    for _ in range(1200):
        if p.poll() is not None:
            fail(f"executor {host} exited {p.returncode}", path)
        if "listening on" in open(path).read():
            return
        time.sleep(0.1)
    fail(f"executor {host} never listened", path)


def one_line(err):
    lines = [l for l in err.splitlines() if l.strip()]
    return lines


try:
    b = start_executor("b", cfg)
    c = start_executor("c", cfg)
    wait_listening("b", b)
    wait_listening("c", c)
    # 1. A mismatched executor a, three ways.
    for key, value, field, want in [("vocab", "1024", "models[0].vocab", "the scheduler has 512, executor 'a' has 1024"),
                                    ("weights_seed", "8", "models[0].weights",
                                     "the scheduler has weights_seed 7, executor 'a' has weights_seed 8"),
                                    ("layers", "8", "models[0].layers", "the scheduler has 4, executor 'a' has 8"),
                                    ("executor_timeout_ms", "1000", "live.executor_timeout_ms",
                                     "the scheduler has 3000, executor 'a' has 1000")]:
        variant = os.path.join(OUT, f"a-{key}.toml")
        text = base.replace('name = "llama-tiny"\n', f'name = "llama-tiny"\n{key} = {value}\n')
        if key == "weights_seed":
            text = base.replace("weights_seed = 7", "weights_seed = 8")
        if key == "executor_timeout_ms":  # (an executor that would give up on the scheduler's beats sooner)
            text = base.replace("executor_timeout_ms = 3000", "executor_timeout_ms = 1000")
        open(variant, "w").write(text)
        a = start_executor("a", variant)
        wait_listening("a", a)
        r = subprocess.run([S, "serve", cfg], capture_output=True, text=True, timeout=120)
        lines = one_line(r.stderr)
        if r.returncode != 2:
            fail(f"{key}: serve exited {r.returncode}, expected 2:\n{r.stderr}")
        expect = (f"slicesched: {cfg}: executor 'a' at tcp://127.0.0.1:{ports['a']} refused this scheduler: "
                  f"{field}: {want} (start serve and every executor from the same config)")
        if lines != [expect]:
            fail(f"{key}: expected the one line\n  {expect}\ngot:\n{r.stderr}")
        print(f"{key}: refused: {lines[0]}")
        a.terminate()
        if a.wait(timeout=20) != 0:
            fail(f"executor a exited {a.returncode} on SIGTERM, expected 0", os.path.join(OUT, "exec-a.log"))
        # b and c took the hello, then heard the scheduler leave: still up.
        time.sleep(0.5)
        for h, p in (("b", b), ("c", c)):
            if p.poll() is not None:
                fail(f"executor {h} exited after a refused serve", os.path.join(OUT, f"exec-{h}.log"))
    log_a = open(os.path.join(OUT, "exec-a.log")).read()
    if "refused 'SliceScheduler" in log_a or "models[0].vocab: the scheduler has 512, executor 'a' has 1024" not in log_a:
        fail("executor a did not log the refusal", os.path.join(OUT, "exec-a.log"))
    if "Interrupted system call" in log_a:
        fail("executor a's SIGTERM said 'Interrupted system call'", os.path.join(OUT, "exec-a.log"))

    # 2. A second serve while the first runs.
    a = start_executor("a", cfg)
    wait_listening("a", a)
    err1 = open(os.path.join(OUT, "serve1.err"), "w")
    first = subprocess.Popen([S, "serve", cfg, "--out", os.path.join(OUT, "run1")], stderr=err1,
                             stdout=subprocess.DEVNULL)
    procs.append(first)
    for _ in range(1200):
        if "serving SliceScheduler" in open(os.path.join(OUT, "serve1.err")).read():
            break
        if first.poll() is not None:
            fail(f"the first serve exited {first.returncode}", os.path.join(OUT, "serve1.err"))
        time.sleep(0.1)
    else:
        fail("the first serve never started", os.path.join(OUT, "serve1.err"))
    r = subprocess.run([S, "serve", cfg], capture_output=True, text=True, timeout=120)
    lines = one_line(r.stderr)
    pattern = (re.escape(f"slicesched: {cfg}: executor 'a' at tcp://127.0.0.1:{ports['a']} refused this scheduler: "
                         f"executor 'a' already serves the scheduler '") + r"[^']* pid " + str(first.pid) +
               re.escape(f", serve {cfg}' (connected ") + r"[0-9.]+ s ago, heard from \d+ ms ago" +
               re.escape("); one scheduler at a time: stop that one first, or start another executor"))
    if r.returncode != 2 or len(lines) != 1 or not re.fullmatch(pattern, lines[0]):
        fail(f"the second serve: exit {r.returncode}, expected 2 and one line naming pid {first.pid}:\n{r.stderr}")
    print(f"second serve: refused: {lines[0]}")
    rc = first.wait(timeout=150)
    err = open(os.path.join(OUT, "serve1.err")).read()
    if rc != 0:
        fail(f"the first serve exited {rc}", os.path.join(OUT, "serve1.err"))
    if "is lost" in err:
        fail("the first serve lost an accelerator to the second", os.path.join(OUT, "serve1.err"))
    p = json.load(open(os.path.join(OUT, "run1", "summary.json")))["policies"]["SliceScheduler"]
    print(f"first serve: {p['requests_done']}/{p['requests_total']} done")
    if p["requests_done"] != p["requests_total"] or p["requests_total"] == 0:
        fail("the first serve did not finish every request")

    # 3. A port out of range.
    r = subprocess.run([S, "executor", "--listen", "tcp://127.0.0.1:99999", "--config", cfg, "--host", "a"],
                       capture_output=True, text=True, timeout=60)
    want = ("slicesched: --listen tcp://127.0.0.1:99999: port 99999 is out of range (expected tcp://HOST:PORT with "
            "PORT 1 to 65535, or * for any)")
    if r.returncode != 2 or one_line(r.stderr) != [want]:
        fail(f"executor --listen :99999: exit {r.returncode}, expected 2 and\n  {want}\ngot:\n{r.stderr}")
    print("port 99999: refused")

    # 4. Ctrl-C while serve waits for an executor that is not there.
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    waiting = subprocess.Popen([S, "serve", cfg], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    time.sleep(2.0)
    t0 = time.monotonic()
    waiting.send_signal(2)  # SIGINT
    try:
        _, err = waiting.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        waiting.kill()
        fail("serve ignored SIGINT while waiting for its executors")
    took = time.monotonic() - t0
    last = one_line(err)[-1:]
    want = (f"slicesched: {cfg}: stopped while waiting for executor 'a' at tcp://127.0.0.1:{ports['a']} to answer")
    if waiting.returncode != 130 or last != [want] or took > 2:
        fail(f"SIGINT while waiting: exit {waiting.returncode} after {took:.1f} s, expected 130 and\n  {want}\n"
             f"got:\n{err}")
    print(f"SIGINT while waiting for executors: exit 130 after {took:.2f} s")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
print("ok")
