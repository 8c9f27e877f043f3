"""Request priorities and the KV budget of the tenant that takes one, vLLM's metric names and the Batch API's cancel,
listing, expiry, metadata and file list/delete, through the `openai` client
against `serve --listen` (tests/cli/serve_priority.toml: two online tenants
taking priorities [-100, 0] and [1, 100], an offline one for batches).

  serve_http_batch_api.py SLICESCHED CONFIG WORKDIR   (.venv's python)
"""
import io
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir, wait_batch  # noqa: E402

import openai  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
srv = Server(slicesched, config, store=os.path.join(work, "batches.sqlite"))
client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")


def metric(text, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(r"([^{ ]+)(?:\{([^}]*)\})? (\S+)", line)
        if m and m.group(1) == name and ",".join(sorted((m.group(2) or "").split(","))) == want:
            return float(m.group(3))
    return None


def metrics(until=None):
    """/metrics, polled until `until(text)` holds (the engine reports a request's
    end to its observers just after the client's reply)."""
    deadline = time.time() + 20
    while True:
        text = srv.get("/metrics")[2].decode()
        if until is None or until(text) or time.time() > deadline:
            return text
        time.sleep(0.1)


# ---- priority: each request goes to the tenant that takes its priority ----
for p, n in ((-5, 3), (7, 2)):
    for _ in range(n):
        client.completions.create(model="llama-tiny", prompt=[1, 2, 3], max_tokens=3, extra_body={"priority": p})
text = metrics(lambda t: metric(t, "vllm:request_success_total", model_name="llama-tiny",
                                finished_reason="length") == 5)
check(metric(text, "slicesched_requests_total", tenant="urgent", state="done") == 3
      and metric(text, "slicesched_requests_total", tenant="background", state="done") == 2,
      "priority -5 ran on 'urgent' (3 done), priority 7 on 'background' (2 done)", srv)
try:
    client.completions.create(model="llama-tiny", prompt=[1], max_tokens=2, extra_body={"priority": 1000})
    check(False, "a priority no tenant takes is refused", srv)
except openai.BadRequestError as e:
    check("no tenant of model 'llama-tiny' takes priority 1000" in e.body["message"],
          "priority 1000: 400 naming the tenants' ranges (%s)" % e.body["message"], srv)

# ---- vLLM's metric names ----
check(metric(text, "vllm:request_success_total", model_name="llama-tiny", finished_reason="length") == 5
      and metric(text, "vllm:generation_tokens_total", model_name="llama-tiny") == 15
      and metric(text, "vllm:prompt_tokens_total", model_name="llama-tiny") == 15
      and metric(text, "vllm:time_to_first_token_seconds_count", model_name="llama-tiny") == 5
      and metric(text, "vllm:e2e_request_latency_seconds_count", model_name="llama-tiny") == 5
      and metric(text, "vllm:request_queue_time_seconds_count", model_name="llama-tiny") == 5
      and metric(text, "vllm:inter_token_latency_seconds_count", model_name="llama-tiny") == 10
      and metric(text, "vllm:num_requests_running", model_name="llama-tiny") == 0
      and metric(text, "vllm:num_requests_waiting", model_name="llama-tiny") == 0
      and metric(text, "vllm:kv_cache_usage_perc", model_name="llama-tiny") == 0,
      "vLLM's metric names with model_name after 5 requests of 3 prompt and 3 output tokens", srv)

# ---- a stop token matched by the max_tokens-th token: "stop" in the reply and the metric ----
greedy = client.completions.create(model="llama-tiny", prompt=[1, 2, 3], max_tokens=3).choices[0]
stopped = client.completions.create(model="llama-tiny", prompt=[1, 2, 3], max_tokens=3,
                                    extra_body={"stop_token_ids": [greedy.model_extra["token_ids"][-1]]}).choices[0]
text = metrics(lambda t: metric(t, "vllm:request_success_total", model_name="llama-tiny", finished_reason="stop") == 1)
check(stopped.finish_reason == "stop" and greedy.finish_reason == "length"
      and metric(text, "vllm:request_success_total", model_name="llama-tiny", finished_reason="stop") == 1
      and metric(text, "vllm:request_success_total", model_name="llama-tiny", finished_reason="length") == 6,
      "a stop token on the last allowed token: 'stop' in the reply and in vllm:request_success_total", srv)

# ---- KV budgets: a request goes to a tenant whose budget holds it ----
# 'urgent' holds 24 tokens a request, 'background' and 'batch' the default:
# a 30-token request is refused at priority -5 and served at 7 (it was
# refused at both, and so were the 67-token batch lines below, by the
# smallest budget of any tenant).
try:
    client.completions.create(model="llama-tiny", prompt=list(range(1, 21)), max_tokens=10,
                              extra_body={"priority": -5})
    check(False, "a request past the budget of every tenant taking its priority is refused", srv)
except openai.BadRequestError as e:
    check("exceeds what the tenants of model 'llama-tiny' that take priority -5 may hold" in e.body["message"]
          and e.body["param"] == "max_tokens",
          "20 + 10 tokens at priority -5 (urgent holds 24): 400 naming the budgets (%s)" % e.body["message"], srv)
big = client.completions.create(model="llama-tiny", prompt=list(range(1, 21)), max_tokens=10,
                                extra_body={"priority": 7})
check(big.usage.completion_tokens == 10, "20 + 10 tokens at priority 7 run on 'background'", srv)
# Without max_tokens, the default (16) is shrunk to what the budget of a
# tenant taking the priority leaves (it was refused: 20 + 16 > 24).
fit = client.completions.create(model="llama-tiny", prompt=list(range(1, 21)),
                                extra_body={"priority": -5, "ignore_eos": True})
check(fit.usage.completion_tokens == 4 and fit.choices[0].finish_reason == "length",
      "20 tokens and no max_tokens at priority -5: the 4 urgent's budget leaves (%d, %s)"
      % (fit.usage.completion_tokens, fit.choices[0].finish_reason), srv)
# A prompt that fills that budget alone: refused naming the prompt, not a
# max_tokens the client never sent.
try:
    client.completions.create(model="llama-tiny", prompt=list(range(1, 25)), extra_body={"priority": -5})
    check(False, "a prompt that fills every budget of its priority is refused", srv)
except openai.BadRequestError as e:
    check(e.body["param"] == "prompt" and "leaves no room for output" in e.body["message"]
          and "max_tokens" not in e.body["message"],
          "24 tokens and no max_tokens at priority -5: 400 naming the prompt (%s)" % e.body["message"], srv)

# ---- an upload with several bad lines names every one ----
bad = "\n".join([
    "not json",
    json.dumps({"custom_id": "a", "url": "/v1/completions", "body": {"model": "llama-tiny", "prompt": [1]}}),
    json.dumps({"url": "/v1/completions", "body": {"model": "llama-tiny", "prompt": [1]}}),
    json.dumps({"custom_id": "b", "url": "/v1/nope", "body": {"model": "llama-tiny", "prompt": [1]}}),
    json.dumps({"custom_id": "c", "url": "/v1/completions", "body": {"model": "llama-tiny", "prompt": [1],
                                                                     "temperature": -1}}),
    json.dumps({"custom_id": "a", "url": "/v1/completions", "body": {"model": "llama-tiny", "prompt": [1]}}),
    "[1]",
])
try:
    client.files.create(file=("bad.jsonl", io.BytesIO(bad.encode())), purpose="batch")
    check(False, "a file with bad lines is refused", srv)
except openai.BadRequestError as e:
    msg = e.body["message"]
    check(msg.startswith("6 bad lines: ") and all("line %d:" % n in msg for n in (1, 3, 4, 5, 6, 7)),
          "every bad line is named (%s)" % msg, srv)


def upload(n, tokens, name):
    lines = [json.dumps({"custom_id": "r%d" % i, "method": "POST", "url": "/v1/completions",
                         "body": {"model": "llama-tiny", "prompt": [1 + i % 50, 2, 3], "max_tokens": tokens}})
             for i in range(n)]
    return client.files.create(file=(name, io.BytesIO("\n".join(lines).encode())), purpose="batch")


# ---- cancel: cancelling, then cancelled, the partial output kept ----
# Far more work than any machine does before the checks below (here about
# 110 lines of 24 tokens a second): a batch that ends first makes them race.
BIG = 4000
f1 = upload(BIG, 64, "big.jsonl")
b1 = client.batches.create(input_file_id=f1.id, endpoint="/v1/completions", completion_window="24h",
                           metadata={"team": "search", "run": "7"})
check(b1.metadata == {"team": "search", "run": "7"} and b1.expires_at == b1.created_at + 24 * 3600,
      "metadata kept, expires_at = created_at + 24h", srv)
wait_batch(lambda: client.batches.retrieve(b1.id), lambda x: x.request_counts.completed >= 1, "a line done")
# Deleting the input of a batch in progress is refused.
req = urllib.request.Request(srv.url + "/v1/files/" + f1.id, method="DELETE")
try:
    urllib.request.urlopen(req, timeout=30)
    check(False, "deleting a running batch's input is refused", srv)
except urllib.error.HTTPError as e:
    check(e.code == 409 and b"still in progress" in e.read(), "deleting a running batch's input: 409", srv)
c = client.batches.cancel(b1.id)
check(c.status in ("cancelling", "cancelled"), "cancel answers cancelling (or cancelled): %s" % c.status, srv)
c = wait_batch(lambda: client.batches.retrieve(b1.id), lambda x: x.status == "cancelled", "cancelled")
out = client.files.content(c.output_file_id).text.splitlines() if c.output_file_id else []
check(1 <= len(out) < BIG and len(out) == c.request_counts.completed and c.cancelled_at,
      "cancelled with its partial output: %d of %d lines" % (len(out), BIG), srv)
check(client.batches.retrieve(b1.id).metadata == {"team": "search", "run": "7"}, "metadata still there", srv)

# ---- completion_window honoured: expires_at passes, the batch expires ----
f2 = upload(BIG, 64, "slow.jsonl")  # (a minute of work here)
b2 = client.batches.create(input_file_id=f2.id, endpoint="/v1/completions", completion_window="2s")
check(b2.expires_at == b2.created_at + 2, "completion_window 2s: expires_at 2 s on", srv)
e = wait_batch(lambda: client.batches.retrieve(b2.id), lambda x: x.status in ("expired", "completed"), "ended")
check(e.status == "expired" and e.expired_at and e.request_counts.completed < BIG,
      "expired (%s) with %d of %d lines done" % (e.status, e.request_counts.completed, BIG), srv)

# ---- list batches with after/limit ----
page = client.batches.list(limit=1)
check(len(page.data) == 1 and page.data[0].id == b2.id and page.has_more, "limit 1: the newest, has_more", srv)
page = client.batches.list(limit=5, after=b2.id)
check([b.id for b in page.data] == [b1.id] and not page.has_more, "after the newest: the older one", srv)

# ---- files: list, delete ----
ids = [f.id for f in client.files.list().data]
check(f1.id in ids and f2.id in ids and c.output_file_id in ids, "GET /v1/files lists inputs and outputs", srv)
d = client.files.delete(f1.id)
check(d.deleted and d.id == f1.id, "DELETE /v1/files/{id}", srv)
check(f1.id not in [f.id for f in client.files.list().data], "the deleted file is gone from the list", srv)
try:
    client.files.retrieve(f1.id)
    check(False, "a deleted file is 404", srv)
except openai.NotFoundError:
    print("ok: a deleted file is 404")

# ---- a batch line without max_tokens takes what the offline budget leaves ----
# 'batch' holds 70 tokens a request: a 60-token prompt gets 10, not 16 (it
# was refused: 60 + 16 > 70).
line = json.dumps({"custom_id": "room", "method": "POST", "url": "/v1/completions",
                   "body": {"model": "llama-tiny", "prompt": list(range(1, 61)), "ignore_eos": True}})
f3 = client.files.create(file=("room.jsonl", io.BytesIO(line.encode())), purpose="batch")
b3 = client.batches.create(input_file_id=f3.id, endpoint="/v1/completions", completion_window="24h")
b3 = wait_batch(lambda: client.batches.retrieve(b3.id), lambda x: x.status in ("completed", "failed"), "ended")
out = [json.loads(x) for x in client.files.content(b3.output_file_id).text.splitlines()] if b3.output_file_id else []
check(b3.status == "completed" and len(out) == 1 and out[0]["response"]["body"]["usage"]["completion_tokens"] == 10,
      "a 60-token line without max_tokens under a 70-token budget: 10 tokens (%s, %s)"
      % (b3.status, out[0]["response"]["body"]["usage"] if out else "no output"), srv)
check(srv.stop() == 0, "SIGTERM drains and exits 0", srv)
print("ok: priority, vLLM metrics, batch cancel/expiry/list/metadata, files list/delete, default max_tokens")
