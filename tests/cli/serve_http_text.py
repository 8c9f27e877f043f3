"""Text prompts end to end: the tiny checkpoint (ctest fixture
tiny_checkpoint) gets a sentencepiece tokenizer.model trained here with
Debian's spm_train, and `serve --listen` takes text through the openai
client. The prompt's ids are the tokenizer's (spm_encode) after its BOS,
the same prompt sent as ids gives the same tokens, and the reply's text is
those tokens decoded (spm_decode).

  serve_http_text.py SLICESCHED CHECKPOINT_DIR WORKDIR   (a Python with openai)
"""
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import Server, check, fresh_dir  # noqa: E402

import openai  # noqa: E402

slicesched, checkpoint, work = sys.argv[1:4]
fresh_dir(work)
ckpt = os.path.join(work, "ckpt")
shutil.copytree(checkpoint, ckpt)
with open(os.path.join(ckpt, "config.json")) as f:
    vocab = json.load(f)["vocab_size"]

# Text with enough distinct words for a vocabulary near the model's, so
# most of what the random weights sample has text.
rng = random.Random(5)
lexicon = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7))) for _ in range(600)]
lexicon += "the lazy fox judges quartz".split()
text = os.path.join(work, "text.txt")
with open(text, "w") as f:
    for i in range(3000):
        f.write(" ".join(rng.choice(lexicon) for _ in range(10)) + "\n")
subprocess.run(["spm_train", "--input=" + text, "--model_prefix=" + os.path.join(ckpt, "tokenizer"),
                "--vocab_size=%d" % vocab, "--hard_vocab_limit=false", "--model_type=bpe", "--bos_id=1", "--eos_id=2",
                "--unk_id=0"], check=True, capture_output=True)
with open(os.path.join(ckpt, "tokenizer.vocab")) as f:
    spm_vocab = sum(1 for _ in f)
check(os.path.exists(os.path.join(ckpt, "tokenizer.model")), "spm_train wrote tokenizer.model")

prompt = "the lazy fox judges quartz"
enc = subprocess.run(["spm_encode", "--model=" + os.path.join(ckpt, "tokenizer.model"), "--output_format=id"],
                     input=prompt + "\n", capture_output=True, text=True, check=True)
ids = [1] + [int(x) for x in enc.stdout.split()]

srv = Server(slicesched, os.path.join(ckpt, "serve.toml"))
client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
r = client.completions.create(model="tiny-qwen", prompt=prompt, max_tokens=24)
check(r.usage.prompt_tokens == len(ids),
      "the text prompt is BOS + spm_encode's %d ids (usage says %d)" % (len(ids) - 1, r.usage.prompt_tokens), srv)
tokens = r.choices[0].model_extra["token_ids"]
check(len(tokens) == 24, "24 tokens generated", srv)
by_ids = client.completions.create(model="tiny-qwen", prompt=ids, max_tokens=24)
check(by_ids.choices[0].model_extra["token_ids"] == tokens, "the same prompt as ids gives the same tokens", srv)
known = [t for t in tokens if t < spm_vocab]
dec = subprocess.run(["spm_decode", "--model=" + os.path.join(ckpt, "tokenizer.model"), "--input_format=id"],
                     input=" ".join(map(str, known)) + "\n", capture_output=True, text=True, check=True)
check(len(known) >= 12 and r.choices[0].text and r.choices[0].text == dec.stdout.rstrip("\n"),
      "the reply's text is its tokens decoded (%d of %d in the tokenizer's %d: %r, spm_decode %r)"
      % (len(known), len(tokens), spm_vocab, r.choices[0].text, dec.stdout), srv)
# Streamed, the same text, token by token (each token's text in context).
parts = []
for chunk in client.completions.create(model="tiny-qwen", prompt=prompt, max_tokens=24, stream=True):
    if chunk.choices:
        parts.append(chunk.choices[0].text or "")
check("".join(parts) == r.choices[0].text,
      "the streamed text equals the whole reply's (%r against %r)" % ("".join(parts), r.choices[0].text), srv)
# The checkpoint's own window (config.json: max_position_embeddings 4096), not a default.
status, _, body = srv.post("/v1/completions", {"model": "tiny-qwen", "prompt": ids, "max_tokens": 5000})
err = json.loads(body)["error"]
check(status == 400 and "context window of 4096 tokens" in err["message"] and err["param"] == "max_tokens",
      "a request past the checkpoint's 4096-token window is refused: %s" % err["message"], srv)
check(srv.stop() == 0, "SIGTERM drains and exits 0", srv)
print("ok: text prompt %r -> %d ids -> %d tokens -> %r" % (prompt, len(ids), len(tokens), r.choices[0].text))
