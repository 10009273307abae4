#!/usr/bin/env python3
"""Writes the rotary frequency tables of Hugging Face transformers (the inv_freq buffer and
attention scaling of LlamaRotaryEmbedding) for several rope configurations as JSON, the
reference tests/test_rope.cpp compares lightwave's tables with. Run where transformers is:
    python3 tools/rope_reference.py > tests/data/rope_hf_reference.json
"""
import json
import sys

import transformers
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

CASES = [
    {"name": "default theta 10000, dim 64", "rotary_dim": 64, "theta": 10000.0, "rope_type": "default"},
    {"name": "default theta 1e6, dim 128", "rotary_dim": 128, "theta": 1000000.0, "rope_type": "default"},
    {"name": "linear x4, dim 64", "rotary_dim": 64, "theta": 10000.0, "rope_type": "linear", "factor": 4.0},
    {"name": "llama3.1 (x8, 1, 4, 8192), dim 128", "rotary_dim": 128, "theta": 500000.0, "rope_type": "llama3",
     "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    {"name": "llama3.2 (x32, 1, 4, 8192), dim 64", "rotary_dim": 64, "theta": 500000.0, "rope_type": "llama3",
     "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    {"name": "yarn x4 from 32768 (Qwen2.5), dim 128", "rotary_dim": 128, "theta": 1000000.0, "rope_type": "yarn",
     "factor": 4.0, "original_max_position_embeddings": 32768},
    {"name": "yarn x4 from 4096, dim 64", "rotary_dim": 64, "theta": 10000.0, "rope_type": "yarn", "factor": 4.0,
     "original_max_position_embeddings": 4096},
]

SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def rotary(case):
    heads = 4
    scaling = {"rope_type": case["rope_type"], **{k: case[k] for k in SCALING_KEYS if k in case}}
    common = dict(hidden_size=heads * case["rotary_dim"], num_attention_heads=heads, head_dim=case["rotary_dim"],
                  max_position_embeddings=4 * case.get("original_max_position_embeddings", 8192))
    try:  # transformers >= 5: rope_parameters carries the theta too
        config = LlamaConfig(rope_parameters={**scaling, "rope_theta": case["theta"]}, **common)
    except TypeError:
        config = LlamaConfig(rope_theta=case["theta"], rope_scaling=None if case["rope_type"] == "default" else scaling,
                             **common)
    emb = LlamaRotaryEmbedding(config=config)
    return [float(x) for x in emb.inv_freq.double().tolist()], float(emb.attention_scaling)


def main():
    out = []
    for case in CASES:
        inv_freq, scaling = rotary(case)
        out.append({**case, "inv_freq": inv_freq, "attention_factor": scaling,
                    "source": f"transformers {transformers.__version__} LlamaRotaryEmbedding"})
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
