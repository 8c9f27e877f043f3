"""A benchmark client nobody here wrote: guidellm (PyPI; the vLLM project's
benchmark tool) runs its synthetic-data benchmark against `serve --listen`
on the tiny checkpoint (ctest fixture tiny_checkpoint) with a trained
tokenizer.json (tests/tokenizer/make_tokenizer_json.py), offline: guidellm
reads the tokenizer from the checkpoint's folder (transformers'
AutoTokenizer), no hub. It must finish with every request successful and
none errored or incomplete; its report's throughput and TTFT are printed
(docs/serving.md quotes them).

  serve_guidellm.py SLICESCHED CHECKPOINT_DIR WORKDIR [REQUESTS]   (.venv's python)
"""
import json
import os
import shutil
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from http_server import Server, check, fresh_dir  # noqa: E402

slicesched, checkpoint, work = sys.argv[1:4]
requests = int(sys.argv[4]) if len(sys.argv) > 4 else 32
fresh_dir(work)
ckpt = os.path.join(work, "ckpt")
shutil.copytree(checkpoint, ckpt)
subprocess.run([sys.executable, os.path.join(here, "..", "tokenizer", "make_tokenizer_json.py"), ckpt], check=True,
               capture_output=True)
# transformers' slow-tokenizer base (guidellm's AutoTokenizer path) wants
# special tokens as strings; both forms are valid tokenizer_config.json.
with open(os.path.join(ckpt, "tokenizer_config.json")) as f:
    config = json.load(f)
config["bos_token"] = "<s>"
with open(os.path.join(ckpt, "tokenizer_config.json"), "w") as f:
    json.dump(config, f)

srv = Server(slicesched, os.path.join(ckpt, "serve.toml"))
report = os.path.join(work, "benchmarks.json")
env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
           GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL="WARNING")
# `python -m guidellm`, not the console script: a script's shebang names the
# interpreter it was installed with, which a moved or linked .venv lacks.
cmd = [sys.executable, "-m", "guidellm", "run",
       "--backend", "kind=openai_http,target=%s,model=tiny-qwen,request_format=/v1/completions" % srv.url,
       "--profile", "kind=concurrent,streams=4",
       "--constraint", "kind=max_requests,count=%d" % requests,
       "--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
       "--tokenizer", "kind=huggingface_auto,model=%s" % ckpt,
       "--output", "kind=json,path=%s" % report,
       "--disable-progress"]
print("$", " ".join(cmd))
r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
print(r.stdout[-4000:])
check(r.returncode == 0, "guidellm exits 0:\n" + r.stderr[-4000:], srv)
check(srv.stop() == 0, "SIGTERM drains and exits 0", srv)

with open(report) as f:
    rep = json.load(f)
bench = rep["benchmarks"][0]
totals = bench["metrics"]["request_totals"] if "request_totals" in bench["metrics"] else bench["request_totals"]


def find(d, *path):
    for p in path:
        d = d[p]
    return d


print("request totals:", totals)
check(totals["successful"] == requests and totals.get("errored", 0) == 0 and totals.get("incomplete", 0) == 0,
      "guidellm: %d requests successful, none errored or incomplete" % requests)
m = bench["metrics"]
figures = {
    "requests_per_second": find(m, "requests_per_second", "successful", "mean"),
    "output_tokens_per_second": find(m, "output_tokens_per_second", "successful", "mean"),
    "ttft_ms_median": find(m, "time_to_first_token_ms", "successful", "median"),
    "ttft_ms_mean": find(m, "time_to_first_token_ms", "successful", "mean"),
    "itl_ms_median": find(m, "inter_token_latency_ms", "successful", "median"),
}
print("guidellm figures:", json.dumps(figures))
