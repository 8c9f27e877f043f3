"""ctest fixture hf_tokenizer_json: a real Hugging Face tokenizer.json, no
network. Trains a byte-level BPE with the `tokenizers` package itself on a
text written here, saves tokenizer.json and a tokenizer_config.json naming
BOS and EOS, and writes what Python's tokenizers says for a few strings
(expected.json) for tests/tokenizer/tokenizer_test.cpp to compare against.

  make_tokenizer_json.py OUT_DIR   (a Python with `tokenizers`: .venv's)

The vocabulary is 512 ids, the tiny checkpoint's (tests/executor/torch),
so that what its random weights sample mostly has text when serve uses it.
"""
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

rng = random.Random(11)
words = ("the scheduler places layer groups on accelerators tokens flow between devices and caches stay "
         "where they were made").split()
lines = [" ".join(rng.choice(words) for _ in range(9)) + "." for _ in range(400)]
# Random words too, so the trainer finds merges for all 512 ids.
lexicon = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7))) for _ in range(600)]
lines += [" ".join(rng.choice(lexicon) for _ in range(10)) for _ in range(3000)]

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>", "<unk>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(lines, trainer=trainer)
tok.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    # BOS as an AddedToken object and EOS as a string: transformers writes both.
    json.dump({"bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>",
               "tokenizer_class": "PreTrainedTokenizerFast"}, f)

texts = ["the scheduler places layer groups on accelerators.", "", "tokens flow between devices",
         "caches stay where they were made, naïve café ☕ 日本"]
expected = {
    "vocab_size": tok.get_vocab_size(with_added_tokens=True),
    "bos_id": tok.token_to_id("<s>"),
    "eos_id": tok.token_to_id("</s>"),
    "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts],
}
expected["cases"].append({"decode_ids": [expected["bos_id"]] + expected["cases"][0]["ids"] + [expected["eos_id"]],
                          "text": tok.decode([expected["bos_id"]] + expected["cases"][0]["ids"] + [expected["eos_id"]],
                                             skip_special_tokens=True)})
# A text prompt's ids (add_special_tokens=True, what transformers and vLLM
# send): this file has no post-processor, so no BOS though the config names
# one. Variants in subfolders: BOS from add_bos_token in the config; from a
# post-processor (Llama-3's way); and a post-processor's BOS that the
# config's add_bos_token false takes away (LlamaTokenizerFast's rebuild).
prompt = texts[2]
expected["prompt_text"] = prompt
expected["prompts"] = {"": tok.encode(prompt).ids}
with_bos = Tokenizer.from_str(tok.to_str())
with_bos.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", expected["bos_id"])])
variants = {"bos_config": (tok, True), "bos_post": (with_bos, None), "bos_off": (with_bos, False),
            "bos_eos_config": (tok, True)}
for name, (t, add_bos) in variants.items():
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    t.save(os.path.join(d, "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "LlamaTokenizerFast"}
    if add_bos is not None:
        config["add_bos_token"] = add_bos
    if name == "bos_eos_config":  # (add_eos_token too: EOS last, as LlamaTokenizerFast's post-processor)
        config["add_eos_token"] = True
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    ids = t.encode(prompt).ids
    if add_bos is True and ids[:1] != [expected["bos_id"]]:
        ids = [expected["bos_id"]] + ids
    if add_bos is False and ids[:1] == [expected["bos_id"]]:
        ids = ids[1:]
    if name == "bos_eos_config":
        ids = ids + [expected["eos_id"]]
    expected["prompts"][name] = ids
with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump(expected, f, ensure_ascii=False)
print("wrote %s/tokenizer.json (%d ids)" % (out, expected["vocab_size"]))
