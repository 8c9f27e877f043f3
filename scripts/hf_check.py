#!/usr/bin/env python3
"""Live mode's runtime against Hugging Face transformers.

Writes tiny random checkpoints with transformers' own LlamaForCausalLM,
Qwen2ForCausalLM and PhiForCausalLM (save_pretrained: config.json +
model.safetensors), runs greedy generation in transformers (eager attention,
float32), and writes the prompts and tokens to OUT/expected.json. The Catch
case "[.hf]" (tests/executor/checkpoint_live_test.cpp) then reads each
checkpoint through SliceScheduler's config.json reader and safetensors
loader and checks the runtime generates the same tokens.

Part of `make test` as ctest hf_reference_tokens (tests/cli/hf_reference.cmake;
scripts/setup.sh puts transformers in .venv). By hand:

  .venv/bin/python scripts/hf_check.py /tmp/hf_ckpts
  SLICESCHED_HF_CHECK=/tmp/hf_ckpts/expected.json build/bin/slicesched_tests "[.hf]"
"""
import json
import os
import sys

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, PhiConfig, PhiForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=4096)
VARIANTS = [
    ("llama", LlamaForCausalLM, LlamaConfig(**SMALL, rope_theta=10000.0, tie_word_embeddings=False)),
    # Llama 3.2-like: tied, llama3 rope scaling (a short original context so
    # it matters at these lengths), and head_dim 32 != hidden / heads.
    ("llama3", LlamaForCausalLM,
     LlamaConfig(**SMALL, head_dim=32, tie_word_embeddings=True, rope_theta=500000.0,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
    ("qwen2", Qwen2ForCausalLM, Qwen2Config(**SMALL, rope_theta=1000000.0, tie_word_embeddings=True)),
    # Phi-2's block: one LayerNorm, attention and a fc1 -> GELU -> fc2 MLP in
    # parallel, biases everywhere, RoPE on the first 40 % of each 16-wide head
    # (6 dimensions); and with erf's GELU and half the head turned.
    ("phi", PhiForCausalLM,
     PhiConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=4, max_position_embeddings=4096, partial_rotary_factor=0.4,
               hidden_act="gelu_new", rope_theta=10000.0, tie_word_embeddings=False)),
    ("phi_erf", PhiForCausalLM,
     PhiConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=4096, partial_rotary_factor=0.5,
               hidden_act="gelu", rope_theta=10000.0, tie_word_embeddings=False)),
]
PROMPTS = [[1, 2, 3, 4, 5], [100, 7, 300, 42, 9, 11, 500, 2, 0, 17, 230, 64]]
NEW = 10


def randomize(model, seed):
    """Weights large enough that the greedy tokens are far from ties."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 0.2 if "embed_tokens" in name else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            else:  # RMSNorm and LayerNorm weights
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))


def greedy(model, prompt):
    ids = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(NEW):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top2 = torch.topk(logits, 2).values
            if float(top2[0] - top2[1]) < 1e-3:
                return None  # a near tie: float rounding could flip it
            out.append(int(logits.argmax()))
            ids.append(out[-1])
    return out


def main():
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    cases = []
    for i, (name, cls, cfg) in enumerate(VARIANTS):
        cfg._attn_implementation = "eager"
        torch.manual_seed(i)
        model = cls(cfg).to(torch.float32).eval()
        for seed in range(1000 * (i + 1), 1000 * (i + 1) + 50):  # the first seed without near ties
            randomize(model, seed)
            tokens = [greedy(model, p) for p in PROMPTS]
            if None not in tokens:
                break
        if cfg.tie_word_embeddings:
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        path = os.path.join(root, name)
        model.save_pretrained(path)
        cases.append({"name": name, "dir": path, "prompts": PROMPTS, "tokens": tokens})
        print(name, cases[-1]["tokens"])
    with open(os.path.join(root, "expected.json"), "w") as f:
        json.dump({"cases": cases}, f)


if __name__ == "__main__":
    main()
