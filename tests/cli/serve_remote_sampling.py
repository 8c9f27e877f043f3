"""Sampling travels to executor processes: the same seeded request (with
penalties and logprobs) through `serve --spawn-local` on
configs/live/tiny-multiprocess.toml (llama-tiny's layers in three executor
processes) and in process on configs/live/http-tiny-cpu.toml (the same
weights) gives the same tokens and log-probabilities; both differ from
greedy, and are the same again with the same seed.

  serve_remote_sampling.py SLICESCHED PROJECT_DIR WORKDIR   (.venv's python)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

import openai  # noqa: E402

slicesched, project, work = sys.argv[1:4]
fresh_dir(work)
seeded = {"temperature": 1.2, "top_p": 0.95, "seed": 7, "presence_penalty": 0.5, "repetition_penalty": 1.1}


def run(config, extra=()):
    # (the batch store in the work folder, not beside the shipped config)
    srv = Server(slicesched, os.path.join(project, "configs", "live", config), extra=list(extra),
                 store=os.path.join(work, config + ".sqlite"))
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    kw = dict(model="llama-tiny", prompt=[1, 2, 3, 4], max_tokens=12, logprobs=2)
    a = c.completions.create(**kw, extra_body=seeded).choices[0]
    b = c.completions.create(**kw, extra_body=seeded).choices[0]
    g = c.completions.create(**kw).choices[0]
    check(a.model_extra["token_ids"] == b.model_extra["token_ids"], "%s: the same seed, the same tokens" % config, srv)
    check(a.model_extra["token_ids"] != g.model_extra["token_ids"], "%s: seeded sampling is not greedy" % config, srv)
    check(srv.stop() == 0, "%s: drains and exits 0" % config, srv)
    return a.model_extra["token_ids"], a.logprobs.token_logprobs


remote = run("tiny-multiprocess.toml", ["--spawn-local"])
local = run("http-tiny-cpu.toml")
check(remote[0] == local[0], "executor processes sample the tokens in-process sampling does (%s)" % remote[0])
check(all(abs(x - y) < 1e-4 for x, y in zip(remote[1], local[1])) and len(remote[1]) == 12,
      "and report the same log-probabilities")
