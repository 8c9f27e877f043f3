"""Text prompts end to end through a Hugging Face tokenizer.json: the tiny
checkpoint (ctest fixture tiny_checkpoint) gets a byte-level BPE
tokenizer.json and tokenizer_config.json trained here by Python's
`tokenizers` (tests/tokenizer/make_tokenizer_json.py), no tokenizer.model,
and `serve --listen` takes text through the openai client. The prompt's
ids are transformers' (PreTrainedTokenizerFast: no BOS, as the tokenizer.json adds
none though tokenizer_config.json names one; it was always added), the same
prompt sent as ids gives the same tokens, and the reply's
text is Python's decode of those tokens. (The tiny model's random weights
mostly repeat one token whatever the prompt, so the ids themselves are
compared with Python's in ctest tokenizer_json, on the same C++ encode.)

  serve_http_tokjson.py SLICESCHED CHECKPOINT_DIR WORKDIR   (.venv's python)
"""
import os
import shutil
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from http_server import Server, check, fresh_dir  # noqa: E402

import openai  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

slicesched, checkpoint, work = sys.argv[1:4]
fresh_dir(work)
ckpt = os.path.join(work, "ckpt")
shutil.copytree(checkpoint, ckpt)
check(not os.path.exists(os.path.join(ckpt, "tokenizer.model")), "the checkpoint has no tokenizer.model")
subprocess.run([sys.executable, os.path.join(here, "..", "tokenizer", "make_tokenizer_json.py"), ckpt], check=True,
               capture_output=True)
tok = Tokenizer.from_file(os.path.join(ckpt, "tokenizer.json"))
vocab = tok.get_vocab_size(with_added_tokens=True)
bos = tok.token_to_id("<s>")

prompt = "the scheduler places tokens, naïve café"
# (tokenizer_config.json's tokenizer_class, built as transformers builds it)
from transformers import PreTrainedTokenizerFast  # noqa: E402
ids = PreTrainedTokenizerFast(tokenizer_file=os.path.join(ckpt, "tokenizer.json"), bos_token="<s>",
                              eos_token="</s>")(prompt).input_ids
check(ids == tok.encode(prompt, add_special_tokens=False).ids and bos not in ids,
      "transformers adds no BOS to this tokenizer's prompts", None)

srv = Server(slicesched, os.path.join(ckpt, "serve.toml"))
client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
r = client.completions.create(model="tiny-qwen", prompt=prompt, max_tokens=24)
check(r.usage.prompt_tokens == len(ids),
      "the text prompt is transformers' %d ids (usage says %d)" % (len(ids), r.usage.prompt_tokens), srv)
tokens = r.choices[0].model_extra["token_ids"]
check(len(tokens) == 24, "24 tokens generated", srv)
by_ids = client.completions.create(model="tiny-qwen", prompt=ids, max_tokens=24)
check(by_ids.choices[0].model_extra["token_ids"] == tokens,
      "the same prompt as transformers' ids gives the same tokens", srv)
known = [t for t in tokens if t < vocab]
want = tok.decode(known, skip_special_tokens=True)
check(len(known) >= 8 and r.choices[0].text and r.choices[0].text == want,
      "the reply's text is its tokens decoded (%d of %d in the tokenizer's %d: %r, tokenizers %r)"
      % (len(known), len(tokens), vocab, r.choices[0].text, want), srv)
# Streamed, the same text, token by token (each token's text in context).
parts = []
for chunk in client.completions.create(model="tiny-qwen", prompt=prompt, max_tokens=24, stream=True):
    if chunk.choices:
        parts.append(chunk.choices[0].text or "")
check("".join(parts) == r.choices[0].text,
      "the streamed text equals the whole reply's (%r against %r)" % ("".join(parts), r.choices[0].text), srv)
check(srv.stop() == 0, "SIGTERM drains and exits 0", srv)
print("ok: text prompt %r -> %d ids -> %d tokens -> %r" % (prompt, len(ids), len(tokens), r.choices[0].text))
