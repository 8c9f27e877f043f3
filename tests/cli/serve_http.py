"""`slicesched serve --listen` as a user meets it: curl and the `openai`
Python client against the server on loopback (models, completions,
streaming, errors, metrics, a batch job end to end), then SIGTERM drains it
and the summary is written.

  serve_http.py SLICESCHED CONFIG WORKDIR   (run with a Python that has openai)
"""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir, wait_batch  # noqa: E402

import openai  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
out = os.path.join(work, "out")
srv = Server(slicesched, config, store=os.path.join(work, "batches.sqlite"), out=out)


def curl(*args):
    r = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", *args], capture_output=True, text=True, timeout=120)
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body


# Health and models.
status, _, body = srv.get("/health")
check(status == 200 and json.loads(body) == {"status": "ok"}, "GET /health is 200 ok", srv)
status, _, body = srv.get("/v1/models")
models = json.loads(body)
check(status == 200 and [m["id"] for m in models["data"]] == ["llama-tiny"], "GET /v1/models lists llama-tiny", srv)

# curl: a completion, then a stream.
code, body = curl(srv.url + "/v1/completions", "-H", "Content-Type: application/json",
                  "-d", '{"model": "llama-tiny", "prompt": [1, 2, 3, 4], "max_tokens": 5}')
check(code == 200, "curl completion is 200 (%d: %s)" % (code, body), srv)
j = json.loads(body)
ids = j["choices"][0]["token_ids"]
check(len(ids) == 5 and all(0 <= t < 512 for t in ids), "5 token ids in the vocabulary", srv)
check(j["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}, "usage", srv)
check(j["choices"][0]["finish_reason"] == "length" and j["object"] == "text_completion", "OpenAI shape", srv)

code, body = curl("-N", srv.url + "/v1/completions", "-H", "Content-Type: application/json",
                  "-d", '{"model": "llama-tiny", "prompt": [5, 6], "max_tokens": 6, "stream": true}')
events = [e[len("data: "):] for e in body.strip().split("\n\n")]
check(code == 200 and events[-1] == "[DONE]", "curl stream ends with [DONE]", srv)
chunks = [json.loads(e) for e in events[:-1]]
token_events = [c for c in chunks if c["choices"][0]["token_ids"]]
check(len(token_events) == 6 and all(len(c["choices"][0]["token_ids"]) == 1 for c in token_events),
      "one event per token (6)", srv)
check(chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 6,
      "the last event has finish_reason and usage", srv)
# With include_usage, the usage is said once, in its own event (OpenAI's):
# it was in the finish event too, and a client that adds up the usage of
# every event counted it twice (an outside probe).
code, body = curl("-N", srv.url + "/v1/completions", "-H", "Content-Type: application/json", "-d",
                  '{"model": "llama-tiny", "prompt": [5, 6], "max_tokens": 6, "stream": true, '
                  '"stream_options": {"include_usage": true}}')
chunks = [json.loads(e[len("data: "):]) for e in body.strip().split("\n\n")[:-1]]
said = [c for c in chunks if c.get("usage")]
check(code == 200 and len(said) == 1 and said[0]["choices"] == [] and said[0]["usage"]["completion_tokens"] == 6
      and chunks[-2]["choices"][0]["finish_reason"] == "length",
      "include_usage: the usage once, in the last event, with no choices (%d events with usage)" % len(said), srv)

# Bad requests: one-line OpenAI-style errors.
for body, want_code, want in [
    ("{not json", 400, "the request body is not valid JSON"),
    ('{"model": "llama-tiny", "prompt": "hello"}', 400, "has no tokenizer"),
    ('{"model": "llama-tiny", "prompt": [1, 9999]}', 400, "token id 9999 is outside"),
    ('{"model": "nope", "prompt": [1]}', 404, "model 'nope' does not exist"),
    ('{"model": "llama-tiny", "prompt": [1], "max_tokens": -1}', 400, "max_tokens: expected an integer >= 1"),
]:
    code, resp = curl(srv.url + "/v1/completions", "-H", "Content-Type: application/json", "-d", body)
    err = json.loads(resp)["error"]
    check(code == want_code and want in err["message"] and "\n" not in err["message"],
          "%s -> %d %s" % (body, want_code, err["message"]), srv)
code, resp = curl(srv.url + "/v1/nothing")
check(code == 404 and "no endpoint GET /v1/nothing" in json.loads(resp)["error"]["message"], "unknown path", srv)

# The openai client.
client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
c = client.completions.create(model="llama-tiny", prompt=[7, 8, 9], max_tokens=4)
check(c.usage.completion_tokens == 4 and c.usage.prompt_tokens == 3, "openai: completion usage", srv)
check(len(c.choices[0].token_ids) == 4, "openai: choices[0].token_ids", srv)
n = 0
last = None
for ev in client.completions.create(model="llama-tiny", prompt=[1, 2, 3], max_tokens=7, stream=True):
    n += len(ev.choices[0].token_ids) if ev.choices else 0
    last = ev
check(n == 7 and last.choices[0].finish_reason == "length", "openai: stream of 7 tokens", srv)
try:
    client.completions.create(model="llama-tiny", prompt="some text", max_tokens=2)
    check(False, "openai: text prompt refused", srv)
except openai.BadRequestError as e:
    check("no tokenizer" in str(e), "openai: text prompt is a BadRequestError", srv)

# A batch job end to end.
lines = [
    {"custom_id": "req-%d" % i, "method": "POST", "url": "/v1/completions",
     "body": {"model": "llama-tiny", "prompt": [i + 1, i + 2], "max_tokens": 2 + i % 3}}
    for i in range(6)
]
path = os.path.join(work, "batch.jsonl")
with open(path, "w") as f:
    f.write("\n".join(json.dumps(x) for x in lines) + "\n")
with open(path, "rb") as f:
    up = client.files.create(file=f, purpose="batch")
check(up.id.startswith("file-") and up.bytes == os.path.getsize(path), "openai: file uploaded", srv)
b = client.batches.create(input_file_id=up.id, endpoint="/v1/completions", completion_window="24h")
check(b.status == "in_progress" and b.request_counts.total == 6, "openai: batch created", srv)
b = wait_batch(lambda: client.batches.retrieve(b.id), lambda x: x.status == "completed", "batch completes")
check(b.request_counts.completed == 6 and b.request_counts.failed == 0 and b.output_file_id, "batch completed", srv)
output = client.files.content(b.output_file_id).text
got = {}
for line in output.splitlines():
    o = json.loads(line)
    got[o["custom_id"]] = o["response"]["body"]["usage"]["completion_tokens"]
check(got == {x["custom_id"]: x["body"]["max_tokens"] for x in lines}, "every line answered, with its tokens", srv)

# A corrupt upload names its line.
bad = os.path.join(work, "bad.jsonl")
with open(bad, "w") as f:
    f.write(json.dumps(lines[0]) + "\n{oops\n")
try:
    with open(bad, "rb") as f:
        client.files.create(file=f, purpose="batch")
    check(False, "corrupt JSONL refused", srv)
except openai.BadRequestError as e:
    check("line 2: not valid JSON" in str(e), "corrupt JSONL: 400 naming line 2", srv)

# Metrics in the Prometheus text format.
status, headers, body = srv.get("/metrics")
text = body.decode()
for name in ['slicesched_queue_depth{tenant="chat"}', 'slicesched_queue_depth{tenant="batch"}',
             "slicesched_ttft_seconds_bucket", "slicesched_tpot_seconds_count", "slicesched_tokens_per_second",
             'slicesched_accelerator_busy_fraction{accelerator="cpu0"}', "slicesched_scheduling_rounds_total",
             'slicesched_requests_total{tenant="batch",state="done"} 6', "slicesched_http_admitted 0"]:
    check(name in text, "metrics: " + name, srv)

import re  # noqa: E402

sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})? -?[0-9.eE+-]+$')
typed = set()
for line in text.splitlines():
    if line.startswith("# TYPE "):
        typed.add(line.split()[2])
    elif not line.startswith("# HELP "):
        check(sample.match(line) is not None, "metrics: a sample line in the text format: " + line, srv)
        base = re.sub(r"_(bucket|sum|count)$", "", line.split("{")[0].split(" ")[0])
        check(base in typed or line.split("{")[0].split(" ")[0] in typed, "metrics: typed before use: " + line, srv)
check(headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"), "metrics: Prometheus content type", srv)

# SIGTERM drains: a stream admitted before it runs to its end, the server
# exits 0 and writes the summary.
import http.client  # noqa: E402
import threading  # noqa: E402
import urllib.parse  # noqa: E402

u = urllib.parse.urlparse(srv.url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
conn.request("POST", "/v1/completions", body=json.dumps(
    {"model": "llama-tiny", "prompt": [3, 1, 4], "max_tokens": 3000, "stream": True}),
    headers={"Content-Type": "application/json"})
resp = conn.getresponse()
first = resp.read1(65536)
check(resp.status == 200 and first.startswith(b"data: "), "a long stream started", srv)
result = {}


def rest():
    result["body"] = first + resp.read()


reader = threading.Thread(target=rest)
reader.start()
rc = srv.stop(signal.SIGTERM)
reader.join()
events = [e for e in result["body"].decode().strip().split("\n\n")]
streamed = sum(len(json.loads(e[6:])["choices"][0]["token_ids"]) for e in events if e.startswith("data: {"))
check(events[-1] == "data: [DONE]" and streamed == 3000, "the stream admitted before SIGTERM got all 3000 tokens", srv)
check(rc == 0, "SIGTERM: exit 0 (got %d)" % rc, srv)
summary = json.load(open(os.path.join(out, "summary.json")))
check("draining" in srv.log(), "SIGTERM drained", srv)
check(os.path.exists(os.path.join(out, "summary.json")) and summary, "summary.json written", srv)
print("PASS")
