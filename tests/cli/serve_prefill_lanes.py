"""Prefill lanes live, through the HTTP API: the same config served with
its prefill lane and without it (the line `prefill_lanes = 1` taken out)
gives every prompt the same greedy tokens and log-probabilities, streamed or
not, while clients that leave mid-stream leave nothing behind; and a drain
(SIGTERM) while hand-offs cross the host link lets every admitted request
finish and exits 0.

  serve_prefill_lanes.py SLICESCHED CONFIG WORKDIR [DEVICE]

DEVICE (e.g. cuda:0) replaces the config's `device = "cpu:*"`: how
scripts/gpu-check.sh runs it on a GPU.
"""
import http.client
import json
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

slicesched, config, work = sys.argv[1:4]
device = sys.argv[4] if len(sys.argv) > 4 else None
fresh_dir(work)
text = open(config).read()
if device:
    text = text.replace('device = "cpu:*"', 'device = "%s"' % device)
check("prefill_lanes = 1\n" in text, "the config has a prefill lane")
configs = {"with": text, "without": text.replace("prefill_lanes = 1\n", "")}
paths = {}
for name, body in configs.items():
    paths[name] = os.path.join(work, name + ".toml")
    with open(paths[name], "w") as f:
        f.write(body)

# Prompts of 3-120 tokens (the tiny model's vocabulary is 512).
PROMPTS = [[1 + (7 * i + j) % 500 for j in range(3 + (37 * i) % 118)] for i in range(24)]


def ask(port, i, stream, leave=False):
    body = {"model": "llama-tiny", "prompt": PROMPTS[i], "max_tokens": 12, "logprobs": 1, "stream": stream}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return ("status", r.status, r.read().decode()[:200])
    if not stream:
        ch = json.loads(r.read())["choices"][0]
        return (ch["token_ids"], ch["logprobs"]["token_logprobs"])
    toks, lps = [], []
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:])["choices"][0]
        toks += ch.get("token_ids", [])
        if ch.get("logprobs"):
            lps += ch["logprobs"]["token_logprobs"]
        if leave and toks:
            c.close()  # (gone after the first token: its sequence is on its way to a decode lane)
            return None
    return (toks, lps)


def serve_all(name):
    srv = Server(slicesched, paths[name])
    port = int(srv.url.rsplit(":", 1)[1])
    got = {}
    threads = []
    for i in range(len(PROMPTS)):
        def run(i=i):
            got[i] = ask(port, i, stream=i % 2 == 1)
        threads.append(threading.Thread(target=run))
    # Clients that leave after their first token, beside them.
    for i in range(8):
        threads.append(threading.Thread(target=ask, args=(port, i, True, True)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    metrics = srv.get("/metrics")[2].decode()
    busy = [l for l in metrics.splitlines() if re.match(r"vllm:num_requests_(running|waiting)\{", l)
            and not l.endswith(" 0")]
    check(srv.stop() == 0, "%s prefill lanes: SIGTERM drains and exits 0" % name, srv)
    check(not busy, "%s prefill lanes: nothing left running or waiting (%s)" % (name, busy), srv)
    return got, srv


with_pl, srv = serve_all("with")
without, _ = serve_all("without")
for i in range(len(PROMPTS)):
    a, b = with_pl[i], without[i]
    if a[0] == "status" or b[0] == "status":
        check(False, "prompt %d answered: %s / %s" % (i, a if a[0] == "status" else "ok", b if b[0] == "status" else "ok"))
    check(len(a[0]) == 12 and a[0] == b[0], "prompt %d of %d tokens: the same 12 tokens with and without prefill lanes"
          % (i, len(PROMPTS[i])))
    check(all(abs(x - y) <= 1e-4 for x, y in zip(a[1], b[1])) and len(a[1]) == 12,
          "prompt %d: the same log-probabilities (within 1e-4)" % i)

# A drain while hand-offs cross a slow host link (200 KB/s: each of these
# prompts' caches takes a tenth of a second or more each way, one after another): every
# admitted request finishes whole, and the server exits 0.
slow = os.path.join(work, "slow.toml")
with open(slow, "w") as f:
    f.write(configs["with"].replace("bandwidth_gbps = 10.0", "bandwidth_gbps = 0.0002"))
srv = Server(slicesched, slow)
port = int(srv.url.rsplit(":", 1)[1])
answers = {}
threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, ask(port, i, True))) for i in range(4)]
for t in threads:
    t.start()
time.sleep(0.3)  # (past the prefills, milliseconds each: the hand-offs are on the link)
check(srv.stop() == 0, "SIGTERM while hand-offs cross the host link: drained, exit 0", srv)
for t in threads:
    t.join()
check(all(a is not None and a[0] != "status" and len(a[0]) == 12 for a in answers.values()) and len(answers) == 4,
      "every admitted request finished with its 12 tokens", srv)
print("PASS")
