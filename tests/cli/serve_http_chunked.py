#!/usr/bin/env python3
"""Chunked prefill (issue 23, item 8), end to end on tests/cli/serve_http.toml
with the chat tenant's token_budget = 64:

  - the same long prompt gives the same tokens with `chunked_prefill = true`
    (a 1,000-token prompt prefilled in 64-token chunks, each attending to the
    cache the chunks before it left) as without (one prefill);
  - a 3-token request sent while a 6,000-token prompt prefills gets its
    first token before the long one does with chunking, and after it
    without (it waited behind the whole prefill). The TTFTs are printed:
    the short one's alone, and beside the long one with and without chunks.

  serve_http_chunked.py SLICESCHED CONFIG WORKDIR
"""
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir, stream_completion  # noqa: E402

slicesched, config, work = sys.argv[1:4]
fresh_dir(work)
base = open(config).read()
chat = 'name = "chat"\n'
assert chat in base
configs = {}
for chunked in (True, False):
    p = os.path.join(work, f"chunked-{chunked}.toml")
    open(p, "w").write(base.replace(chat, chat + "token_budget = 64\n" +
                                    ("chunked_prefill = true\n" if chunked else "")))
    configs[chunked] = p


def prompt(n, seed):
    return [1 + (seed + 7 * i) % 500 for i in range(n)]


def stream(srv, ids, max_tokens, out, key):
    """Sends a streamed completion; records (sent, first token time, token ids) in out[key]."""
    out[key] = stream_completion(int(srv.url.rsplit(":", 1)[1]), ids, max_tokens)


results = {}
for chunked in (True, False):
    srv = Server(slicesched, configs[chunked])
    out = {}
    stream(srv, prompt(1000, 3), 8, out, "same")
    stream(srv, prompt(3, 1), 1, out, "alone")
    long_t = threading.Thread(target=stream, args=(srv, prompt(6000, 5), 1, out, "long"))
    long_t.start()
    # The long prefill is under way: running, by the server's own count (a
    # fixed sleep raced the admission on a loaded machine).
    deadline = time.time() + 30
    while time.time() < deadline and not re.search(r"^vllm:num_requests_running\{[^}]*\} [1-9]",
                                                   srv.get("/metrics")[2].decode(), re.M):
        time.sleep(0.01)
    stream(srv, prompt(3, 1), 1, out, "short")
    long_t.join()
    check(srv.stop() == 0, f"chunked_prefill {chunked}: SIGTERM exits 0", srv)
    results[chunked] = out
    ttft = {k: out[k][1] - out[k][0] for k in ("alone", "short", "long")}
    print(f"chunked_prefill = {str(chunked).lower()}: TTFT of the 3-token request alone {ttft['alone'] * 1000:.1f} ms, "
          f"beside the 6,000-token prompt {ttft['short'] * 1000:.1f} ms; the long prompt's TTFT {ttft['long']:.2f} s")

check(len(results[True]["same"][2]) == 8 and results[True]["same"][2] == results[False]["same"][2],
      "a 1,000-token prompt gives the same tokens chunked as whole (%s)" % results[True]["same"][2])
check(results[True]["short"][2] == results[True]["alone"][2], "the short request's token is the same beside the long")
check(results[True]["short"][1] < results[True]["long"][1],
      "chunked: the short request's first token comes before the long prompt's")
check(results[False]["short"][1] > results[False]["long"][1],
      "whole (for contrast): the short request waited behind the long prefill")
print("PASS")
