#!/usr/bin/env python3
"""Writes a small randomly initialised Llama-architecture GGUF model that keeps a real model's
tokenizer and chat template: for server load tests where the text does not matter but the
requests, the tokenizer and the template do (a few MB, so it travels where the real model
cannot). Token embeddings are Q8_0 (the vocabulary dominates the size), the rest F16/F32.

    tiny_gguf.py SOURCE.gguf OUT.gguf [--hidden 128] [--layers 2] [--heads 2] [--kv-heads 1]
                 [--ffn 256] [--seed 0]

Needs the `gguf` package (llama.cpp's gguf-py). The source must be a Llama-architecture GGUF.
"""
import argparse
import sys

import numpy as np
import gguf

SIZE_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "rope.dimension_count")


def field_value(field):
    """A reader field's value as GGUFWriter.add_key_value takes it."""
    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data], kind, sub
        return [field.parts[i].tolist()[0] for i in field.data], kind, sub
    if kind == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), kind, None
    return field.parts[field.data[0]].tolist()[0], kind, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads or a.hidden % 32:
        sys.exit("tiny_gguf: hidden must be a multiple of 32 and of heads, heads a multiple of kv-heads")

    src = gguf.GGUFReader(a.source)
    arch = field_value(src.fields["general.architecture"])[0]
    if arch != "llama":
        sys.exit(f"tiny_gguf: {a.source} is a '{arch}' model; only llama-architecture sources are supported")
    vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    head_dim = a.hidden // a.heads
    sizes = {"block_count": a.layers, "embedding_length": a.hidden, "feed_forward_length": a.ffn,
             "attention.head_count": a.heads, "attention.head_count_kv": a.kv_heads,
             "rope.dimension_count": head_dim}

    w = gguf.GGUFWriter(a.out, arch)
    for name, field in src.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type", "general.name"):
            continue
        short = name[len(arch) + 1:] if name.startswith(arch + ".") else None
        if short in SIZE_KEYS:
            w.add_uint32(name, sizes[short])
            continue
        if short == "vocab_size":
            w.add_uint32(name, vocab)
            continue
        value, kind, sub = field_value(field)
        w.add_key_value(name, value, kind, sub)
    w.add_string("general.name", f"random {a.layers}-layer {a.hidden}-wide model with the tokenizer of {a.source}")

    rng = np.random.default_rng(a.seed)
    def dense(rows, cols):  # numpy (out, in): GGUF stores the reverse order
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)
    embd = rng.standard_normal((vocab, a.hidden)).astype(np.float32)
    w.add_tensor("token_embd.weight", gguf.quants.quantize(embd, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(a.hidden, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(a.hidden, np.float32))
        w.add_tensor(p + "attn_q.weight", dense(a.hidden, a.hidden))
        w.add_tensor(p + "attn_k.weight", dense(a.kv_heads * head_dim, a.hidden))
        w.add_tensor(p + "attn_v.weight", dense(a.kv_heads * head_dim, a.hidden))
        w.add_tensor(p + "attn_output.weight", dense(a.hidden, a.hidden))
        w.add_tensor(p + "ffn_gate.weight", dense(a.ffn, a.hidden))
        w.add_tensor(p + "ffn_up.weight", dense(a.ffn, a.hidden))
        w.add_tensor(p + "ffn_down.weight", dense(a.hidden, a.ffn))
    w.add_tensor("output_norm.weight", np.ones(a.hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"tiny_gguf: wrote {a.out}: {a.layers} layers, hidden {a.hidden}, heads {a.heads}/{a.kv_heads} x {head_dim}, "
          f"vocab {vocab}")


if __name__ == "__main__":
    main()
