#!/usr/bin/env python3
"""A bounded load test of `slicesched serve --listen`: CLIENTS concurrent
streaming clients send REQUESTS completions in all (each one request at a
time), and every request must end in a complete answer (MAX_TOKENS token
events, then the end event and [DONE]) or a 429 with Retry-After. A 429 is
an answer, not retried. With --rate the load is open-loop instead: request i
is sent at i / RATE seconds (by the next free client), the arrivals a replay
of a constant-rate stream would have, for comparing the HTTP path with
`slicesched serve` replaying that stream. Prints one JSON object: counts, wall time,
requests/s (complete answers per second of wall time), TTFT p50/p99 (send to
first token event) and output tokens/s. Exit status 1 when a request got
anything else.

  scripts/http_load.py --url http://127.0.0.1:8000 --clients 32 --requests 256
  scripts/http_load.py --url http://127.0.0.1:8000 --clients 32 --requests 160 --rate 8

Standard library only, so it runs anywhere the server does.
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def one_request(host, port, body, max_tokens):
    """('ok', ttft_s, total_s, tokens) | ('429', retry_after) | ('error', why)."""
    conn = http.client.HTTPConnection(host, port, timeout=300)
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status == 429:
            retry = resp.getheader("Retry-After")
            resp.read()
            return ("429", retry) if retry else ("error", "429 without Retry-After")
        if resp.status != 200:
            return ("error", "HTTP %d: %s" % (resp.status, resp.read()[:300]))
        ttft = None
        tokens = 0
        ended = done = False
        buf = b""
        while True:
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    return ("error", "not a server-sent event: %r" % event[:100])
                data = event[6:]
                if data == b"[DONE]":
                    done = True
                    continue
                j = json.loads(data)
                if "error" in j:
                    return ("error", "error event: %s" % j["error"].get("message"))
                choice = j["choices"][0]
                n = len(choice.get("token_ids", []))
                if n and ttft is None:
                    ttft = time.monotonic() - t0
                tokens += n
                if choice.get("finish_reason") is not None:
                    ended = True
                    usage = j.get("usage") or {}
                    if usage.get("completion_tokens") != tokens:
                        return ("error", "usage says %s tokens, %d events" % (usage.get("completion_tokens"), tokens))
        if not (ended and done):
            return ("error", "stream ended early after %d token(s)" % tokens)
        if tokens != max_tokens:
            return ("error", "%d token(s) streamed, %d asked" % (tokens, max_tokens))
        return ("ok", ttft, time.monotonic() - t0, tokens)
    except Exception as e:  # a refused or dropped connection is a failure of the test
        return ("error", "%s: %s" % (type(e).__name__, e))
    finally:
        conn.close()


def run(url, clients, requests, prompt_tokens, max_tokens, model, vocab, seed, rate=None):
    u = urllib.parse.urlparse(url)
    rng = random.Random(seed)
    bodies = [
        {
            "model": model,
            "prompt": [rng.randrange(vocab) for _ in range(prompt_tokens)],
            "max_tokens": max_tokens,
            "stream": True,
        }
        for _ in range(requests)
    ]
    results = [None] * requests
    next_index = [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next_index[0]
                if i >= requests:
                    return
                next_index[0] += 1
            if rate:
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            results[i] = one_request(u.hostname, u.port, bodies[i], max_tokens)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in results if r[0] == "ok"]
    rejected = [r for r in results if r[0] == "429"]
    errors = [r[1] for r in results if r[0] == "error"]
    ttft = [r[1] for r in ok]
    tokens = sum(r[3] for r in ok)
    return {
        "clients": clients,
        "rate": rate,
        "requests": requests,
        "complete": len(ok),
        "rejected_429": len(rejected),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(ok) / wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_p50_s": round(percentile(ttft, 50), 4),
        "ttft_p99_s": round(percentile(ttft, 99), 4),
        "latency_p50_s": round(percentile([r[2] for r in ok], 50), 4),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--model", default="llama-tiny")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=None, help="open-loop: requests per second (default: closed-loop)")
    a = ap.parse_args()
    if a.clients < 1 or a.requests < 1 or a.prompt_tokens < 1 or a.max_tokens < 1:
        ap.error("--clients, --requests, --prompt-tokens and --max-tokens must be >= 1")
    out = run(a.url, a.clients, a.requests, a.prompt_tokens, a.max_tokens, a.model, a.vocab, a.seed, a.rate)
    print(json.dumps(out))
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
