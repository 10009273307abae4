#!/usr/bin/env python3
"""Compares lightwave with Hugging Face transformers on small randomly initialised models of
every supported architecture: logits of a batch of prompts in fp32 and bf16, and greedy
continuations in fp32. Needs torch and transformers (the GPU machine has both; elsewhere
transformers runs on the CPU, beside a host-emulator build of lightwave).

    python3 tools/compare_hf.py --lightwave build/device/src/app/lightwave [--arch llama,qwen3] [--keep DIR]
                                [--tp N [--nnodes M]] [--quant fp8|gptq|gptq8|awq|w4a16] [--group-size 32]

--quant fp8 saves the attention, dense-MLP and routed experts' projections (each expert's own
matrices; not experts fused into one tensor, nor shared experts) as a Hugging Face fp8
checkpoint (F8_E4M3 weights, weight_scale_inv per 32 x 32 block, quantization_config
quant_method fp8),
quantised by torch (a block's scale is its absolute maximum / 448, values cast to
float8_e4m3fn), and gives transformers the dequantised weights (fp8 value x scale, in fp32):
both engines then run the same weights, and the fp32 and bf16 bounds below hold unchanged.

--quant gptq, gptq8, awq and w4a16 save the same projections with 4-bit (gptq8: 8-bit) weights in
groups of 32 input columns (--group-size), quantised by round to nearest per output row and group (numpy's rint) with the scales
rounded to their stored dtype first, and likewise give transformers the dequantised weights
((q - zero) x scale in fp32):
  gptq: AutoGPTQ's layout (qweight [K/8, N], qzeros [K/32, N/8] holding zero - 1, scales f16,
    g_idx [K]), asymmetric (scale (max - min) / 15, zero rint(-min / scale) in 1..15), with act
    order: each matrix's columns grouped by a random permutation, g_idx naming each column's
    group; quantization_config {quant_method gptq, desc_act true, sym false, checkpoint_format
    gptq};
  awq: AutoAWQ's GEMM layout (qweight [K, N/8] and qzeros [K/32, N/8] packed along N in the
    order 0, 2, 4, 6, 1, 3, 5, 7; scales f16), asymmetric as gptq (zero in 0..15);
  w4a16: compressed-tensors pack-quantized (weight_packed [N, K/8] holding q + 8, weight_scale
    bf16 [N, K/32], weight_shape), symmetric group strategy: scale amax / 7.5 (llm-compressor's
    rule), q = clamp(rint(w / scale), -8, 7).
  gptq8: AutoGPTQ's 8-bit layout (qweight [K/4, N] and qzeros [K/32, N/4] of bytes, zero - 1
    stored, scales f16, g_idx [K]), asymmetric with act order as gptq (scale (max - min) / 255,
    zero in 1..255); quantization_config {quant_method gptq, bits 8, desc_act true, sym false}:
    lightwave keeps these as int8 with group scales, zero points and a column permutation (its
    symmetric, in-order case is covered by the st_gptq8 fixtures of the test suite).
The packed layouts need N a multiple of 8 and K a multiple of the group: a projection that is
not (every down projection: K = 100, 104, 56 or 48 here; the dense MLPs' gate and up, N = 100)
stays fp32 as "<p>.weight" in all three formats, and with the router, shared experts and
lm_head is listed in compressed-tensors' "ignore" and AWQ's "modules_to_not_convert" (GPTQ's
config has no such list). So the dense models run 4-bit attention, the MoE models 4-bit
attention and routed experts' gate and up projections.

--tp N runs lightwave with tensor parallelism over N GPUs; --nnodes M splits those ranks over M
processes on this host (each sees its own GPUs through CUDA_VISIBLE_DEVICES and node 0 meets
the others over TCP on 127.0.0.1), as a group spanning hosts would run.

Each model: a few layers, grouped-query attention, odd intermediate sizes; saved with
save_pretrained (safetensors) beside a small BPE tokenizer.json, loaded by `lightwave score`.
Bounds: fp32 logits within 1e-4 of transformers' (max |difference| relative to the largest
|logit| of the prompt); greedy continuations of 32 tokens identical in fp32. bf16: both
engines' bf16 logits are measured against transformers' fp32 logits (relative L2 error over
each prompt), and lightwave's error may be at most 1.5 times transformers' own: bf16 rounds
every activation to 8 bits and the engines round in different places (in MoE models a
rounding can flip a near-tied expert choice), so the reference for "as accurate as bf16
allows" is what transformers itself achieves in bf16.
Exit status 1 if any architecture fails."""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

VOCAB = 384
GREEDY = 32
# Where transformers runs: the GPU where there is one, else the CPU (lightwave then on whatever
# its build targets: the host emulator on a machine without a GPU).
TORCH_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PROMPT_LENS = [5, 17, 40]


def configs():
    common = dict(vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2,
                  intermediate_size=100, max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2)
    c = {}
    c["llama"] = transformers.LlamaConfig(**common, rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})
    c["mistral"] = transformers.MistralConfig(**common, sliding_window=None, rope_theta=1e6)
    # A window shorter than the longer prompts and the greedy continuations, so that it matters.
    c["mistral_window"] = transformers.MistralConfig(**common, sliding_window=12, rope_theta=1e6)
    q2 = dict(common, tie_word_embeddings=True)
    c["qwen2"] = transformers.Qwen2Config(**q2, rope_theta=1e6)
    c["qwen3"] = transformers.Qwen3Config(**dict(common, head_dim=32), rope_theta=1e6)
    # transformers' grouped expert GEMM needs 16-byte strides: expert widths are multiples of 8.
    moe = dict(common, intermediate_size=104)
    c["mixtral"] = transformers.MixtralConfig(**moe, num_local_experts=4, num_experts_per_tok=2)
    c["qwen2_moe"] = transformers.Qwen2MoeConfig(**moe, num_experts=5, num_experts_per_tok=2, moe_intermediate_size=56,
                                                 shared_expert_intermediate_size=72, decoder_sparse_step=1,
                                                 norm_topk_prob=False)
    c["qwen3_moe"] = transformers.Qwen3MoeConfig(**dict(moe, head_dim=32), num_experts=6, num_experts_per_tok=2,
                                                 moe_intermediate_size=48, decoder_sparse_step=1, norm_topk_prob=True)
    return c


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_lightwave(cmd, tp, nnodes):
    """Runs a lightwave command on tp ranks over nnodes processes; node 0's result, with the
    other nodes' failures added."""
    if tp == 1:
        return subprocess.run(cmd, capture_output=True, text=True)
    cmd = cmd + ["--tensor-parallel-size", str(tp)]
    if nnodes == 1:
        return subprocess.run(cmd, capture_output=True, text=True)
    per = tp // nnodes
    dist = ["--nnodes", str(nnodes), "--dist-init-addr", f"127.0.0.1:{free_port()}"]
    def env(node):
        return dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(node * per + i) for i in range(per)))
    followers = [subprocess.Popen(cmd + dist + ["--node-rank", str(n)], env=env(n), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for n in range(1, nnodes)]
    r = subprocess.run(cmd + dist + ["--node-rank", "0"], env=env(0), capture_output=True, text=True)
    for n, f in enumerate(followers, 1):
        _, err = f.communicate(timeout=300)
        if f.returncode != 0:
            r.returncode = r.returncode or f.returncode
            r.stderr += f"\nnode {n}: {err.strip()[-800:]}"
    return r


def save_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 8, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = ["The quick brown fox jumps over the lazy dog %d times." % i for i in range(200)]
    tok.train_from_iterator(text, trainer)
    tok.save(os.path.join(path, "tokenizer.json"))


FP8_BLOCK = 32
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")


def fp8_quantise(w, block):
    """w [N, K] float32 -> (float8_e4m3fn [N, K], scales [ceil(N/block), ceil(K/block)] float32,
    the dequantised values)."""
    n, k = w.shape
    sn, sk = -(-n // block), -(-k // block)
    padded = torch.zeros(sn * block, sk * block, dtype=torch.float32)
    padded[:n, :k] = w
    blocks = padded.view(sn, block, sk, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scales = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    full = scales.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :k]
    q = (w / full).to(torch.float8_e4m3fn)
    return q, scales, q.to(torch.float32) * full


INT4_GROUP = 32
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ GEMM: nibble i of a word holds column 8c + AWQ_ORDER[i]


def is_projection(name, t):
    """The tensors --quant quantises: attention, dense-MLP and routed experts' own [N, K] matrices."""
    return (name.endswith(".weight") and name.rsplit(".", 2)[-2] in PROJECTIONS and "shared_expert" not in name
            and t.dim() == 2)


def round_scales(s, dtype):
    """float32 scales rounded to float16 or bfloat16 (to nearest even), as float32; 1 where that is 0."""
    if dtype == "float16":
        r = s.astype(np.float16).astype(np.float32)
    else:
        u = s.astype(np.float32).view(np.uint32).astype(np.uint64)
        r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    return np.where(r == 0, np.float32(1), r).astype(np.float32)


def int4_quantise(w, g_idx, sym, scale_dtype, zero_min=0, bits=4):
    """w [N, K] float32 by round to nearest per output row and group of input columns (g_idx[k]:
    column k's group; act order scatters a group's columns), maxq = 2^bits - 1 (15 at 4 bits).
    Asymmetric: s = (max - min) / maxq, z = clamp(rint(-min / s), zero_min, maxq); symmetric
    (compressed-tensors, AutoGPTQ's sym): s = amax / (maxq / 2), z = 2^(bits - 1); both with s
    rounded to scale_dtype first, q = clamp(rint(w / s) + z, 0, maxq).
    -> q [N, K], z [G, N], s float32 [G, N] (values of scale_dtype), (q - z) * s [N, K] float32."""
    maxq = 2 ** bits - 1
    n, k = w.shape
    groups = int(g_idx.max()) + 1
    q = np.zeros((n, k), np.int64)
    z = np.zeros((groups, n), np.int64)
    s = np.zeros((groups, n), np.float32)
    for g in range(groups):
        cols = np.flatnonzero(g_idx == g)
        blk = w[:, cols]
        if sym:
            s[g] = round_scales(np.abs(blk).max(axis=1) / np.float32(maxq / 2), scale_dtype)
            z[g] = 2 ** (bits - 1)
        else:
            lo, hi = blk.min(axis=1), blk.max(axis=1)
            s[g] = round_scales((hi - lo) / np.float32(maxq), scale_dtype)
            z[g] = np.clip(np.rint(-lo / s[g]), zero_min, maxq)
        q[:, cols] = np.clip(np.rint(blk / s[g][:, None]) + z[g][:, None], 0, maxq)
    deq = ((q - z[g_idx].T).astype(np.float32) * s[g_idx].T).astype(np.float32)
    return q, z, s, deq


def pack_int4(a, order=tuple(range(8))):
    """a [R, C] of 0..15 -> int32 [R, C/8]: bits 4i..4i+3 of word [r, c] hold a[r, 8c + order[i]]."""
    r, c = a.shape
    a = a.astype(np.uint32).reshape(r, c // 8, 8)[:, :, list(order)]
    words = np.zeros((r, c // 8), np.uint32)
    for i in range(8):
        words |= a[:, :, i] << np.uint32(4 * i)
    return words.view(np.int32)


def pack_int8(a):
    """a [R, C] of 0..255 -> int32 [R, C/4]: bits 8i..8i+7 of word [r, c] hold a[r, 4c + i]."""
    r, c = a.shape
    a = a.astype(np.uint32).reshape(r, c // 4, 4)
    words = np.zeros((r, c // 4), np.uint32)
    for i in range(4):
        words |= a[:, :, i] << np.uint32(8 * i)
    return words.view(np.int32)


def int4_tensors(quant, w, rng):
    """One [N, K] float32 matrix in a 4-bit format: ({suffix: tensor} replacing its "weight",
    the dequantised values [N, K] float32). gptq and gptq8 (8-bit): v1 (zero - 1 stored),
    asymmetric, act order with a random permutation; awq: asymmetric GEMM layout; w4a16:
    compressed-tensors pack-quantized, symmetric, bf16 scales."""
    n, k = w.shape
    g_idx = np.empty(k, np.int32)
    g_idx[rng.permutation(k) if quant in ("gptq", "gptq8") else np.arange(k)] = np.arange(k) // INT4_GROUP
    t = torch.from_numpy
    if quant == "gptq8":
        q, z, s, deq = int4_quantise(w, g_idx, False, "float16", zero_min=1, bits=8)
        out = {"qweight": t(np.ascontiguousarray(pack_int8(q).T)), "qzeros": t(pack_int8(z - 1)),
               "scales": t(s).to(torch.float16), "g_idx": t(g_idx)}
    elif quant == "gptq":
        q, z, s, deq = int4_quantise(w, g_idx, False, "float16", zero_min=1)
        out = {"qweight": t(np.ascontiguousarray(pack_int4(q).T)), "qzeros": t(pack_int4(z - 1)),
               "scales": t(s).to(torch.float16), "g_idx": t(g_idx)}
    elif quant == "awq":
        q, z, s, deq = int4_quantise(w, g_idx, False, "float16")
        out = {"qweight": t(pack_int4(np.ascontiguousarray(q.T), AWQ_ORDER)), "qzeros": t(pack_int4(z, AWQ_ORDER)),
               "scales": t(s).to(torch.float16)}
    else:
        q, z, s, deq = int4_quantise(w, g_idx, True, "bfloat16")
        out = {"weight_packed": t(pack_int4(q)), "weight_scale": t(np.ascontiguousarray(s.T)).to(torch.bfloat16),
               "weight_shape": torch.tensor([n, k], dtype=torch.int64)}
    return {key: v.contiguous() for key, v in out.items()}, deq


def quantization_config(quant, full_precision):
    """config.json's quantization_config; full_precision: the Linear modules left unquantised."""
    if quant == "fp8":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    if quant == "gptq8":
        return {"quant_method": "gptq", "bits": 8, "group_size": INT4_GROUP, "desc_act": True, "sym": False,
                "checkpoint_format": "gptq"}
    if quant == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": INT4_GROUP, "desc_act": True, "sym": False,
                "checkpoint_format": "gptq"}
    if quant == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": INT4_GROUP, "zero_point": True, "version": "gemm",
                "modules_to_not_convert": full_precision}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": INT4_GROUP},
                "input_activations": None}},
            "ignore": full_precision}


def save_quantised(d, deq_dir, quant):
    """Rewrites d's safetensors with the projections (routed experts' matrices included, shared
    experts not) in the quant format, adds the quantization_config, and writes their dequantised
    values into deq_dir's copy of the checkpoint (transformers then loads that copy: its own
    fused expert parameters are filled from the per-expert tensors as from any checkpoint).
    4-bit formats keep a projection whose N is not a multiple of 8 or whose K is not a multiple
    of the group in fp32 as "<p>.weight"."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    tensors = load_file(path)
    dequantised = dict(tensors)
    rng = np.random.default_rng(0)
    for name in list(tensors):
        if not is_projection(name, tensors[name]):
            continue
        w = tensors[name].float()
        if quant == "fp8":
            q, scales, deq = fp8_quantise(w, FP8_BLOCK)
            tensors[name] = q
            tensors[name + "_scale_inv"] = scales.contiguous()
        else:
            if w.shape[0] % 8 or w.shape[1] % INT4_GROUP:
                continue
            packed, deq = int4_tensors(quant, w.numpy(), rng)
            del tensors[name]
            tensors.update({name[:-len("weight")] + suffix: v for suffix, v in packed.items()})
            deq = torch.from_numpy(deq)
        dequantised[name] = deq.to(dequantised[name].dtype)
    # After a 4-bit rewrite the [N, K] ".weight" tensors left (embeddings aside) are the Linears
    # kept in full precision (lm_head, routers, shared experts, projections of unfit shapes),
    # which compressed-tensors' ignore and AWQ's modules_to_not_convert list.
    full_precision = sorted((n[:-len(".weight")] for n, t in tensors.items()
                             if n.endswith(".weight") and t.dim() == 2 and "embed_tokens" not in n),
                            key=lambda m: (m != "lm_head", m))
    save_file(tensors, path, metadata={"format": "pt"})
    save_file(dequantised, os.path.join(deq_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg_path = os.path.join(d, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["quantization_config"] = quantization_config(quant, full_precision)
    json.dump(cfg, open(cfg_path, "w"), indent=2)


def compare(arch, cfg, lightwave, root, rng, tp=1, nnodes=1, quant=""):
    d = os.path.join(root, arch)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # wider weights than the default init, so logits are far from uniform
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                # A decisive router, as trained ones are: with near-tied expert scores, bf16
                # rounding anywhere before the router flips choices, in either engine.
                p.normal_(0.0, 0.5)
            elif "norm" in name:
                p.uniform_(0.6, 1.4)
            elif p.dim() >= 2:
                p.normal_(0.0, 0.08)
            else:  # biases
                p.normal_(0.0, 0.05)
    model.generation_config.eos_token_id = None
    model.save_pretrained(d)
    if quant:
        deq_dir = d + "_dequantised"
        model.save_pretrained(deq_dir)
        save_quantised(d, deq_dir, quant)
        model = transformers.AutoModelForCausalLM.from_pretrained(deq_dir, dtype=torch.float32)
        model.generation_config.eos_token_id = None
    save_tokenizer(d)
    prompts = [rng.integers(3, VOCAB, size=n).tolist() for n in PROMPT_LENS]
    with open(os.path.join(d, "prompts.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_tokens": GREEDY}, f)

    results = {}
    ref32 = {}
    for dtype, torch_dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        out = os.path.join(d, "out_" + dtype)
        r = run_lightwave([lightwave, "score", "--model", d, "--dtype", dtype, "--input", os.path.join(d, "prompts.json"),
                           "--out", out], tp, nnodes)
        if r.returncode != 0:
            keys = sorted(json.load(open(os.path.join(d, "config.json"))))
            return f"lightwave score ({dtype}) failed: {r.stderr.strip()[-800:]}\n  config.json keys: {keys}"
        meta = json.load(open(os.path.join(out, "result.json")))
        m = model.to(TORCH_DEVICE, torch_dtype).eval()
        worst = ours_err = hf_err = 0.0
        for i, p in enumerate(prompts):
            ours = np.fromfile(os.path.join(out, f"logits_{i}.f32"), dtype=np.float32).reshape(len(p), meta["vocab"])
            with torch.no_grad():
                ref = m(torch.tensor([p], device=TORCH_DEVICE)).logits[0].float().cpu().numpy()
            worst = max(worst, float(np.abs(ours - ref).max() / np.abs(ref).max()))
            if dtype == "f32":
                ref32[i] = ref
            else:
                norm = np.linalg.norm(ref32[i])
                ours_err = max(ours_err, float(np.linalg.norm(ours - ref32[i]) / norm))
                hf_err = max(hf_err, float(np.linalg.norm(ref - ref32[i]) / norm))
        results[dtype] = worst
        if dtype == "bf16":
            results["bf16_ours"], results["bf16_hf"] = ours_err, hf_err
        if dtype == "f32":
            same = True
            for i, p in enumerate(prompts):
                with torch.no_grad():
                    g = m.generate(torch.tensor([p], device=TORCH_DEVICE), max_new_tokens=GREEDY, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)[0, len(p):].tolist()
                same &= g == meta["greedy"][i]
            results["greedy"] = same
    ok = results["f32"] <= 1e-4 and results["bf16_ours"] <= 1.5 * results["bf16_hf"] and results["greedy"]
    return ("ok" if ok else "FAILED") + f"  fp32 max {results['f32']:.2e}  bf16 error vs fp32: lightwave " + \
        f"{results['bf16_ours']:.2e}, transformers {results['bf16_hf']:.2e}  greedy-32 " + \
        ("identical" if results["greedy"] else "DIFFERENT")


def main():
    global INT4_GROUP
    ap = argparse.ArgumentParser()
    ap.add_argument("--lightwave", required=True)
    ap.add_argument("--arch", default="")
    ap.add_argument("--keep", default="")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--nnodes", type=int, default=1)
    ap.add_argument("--quant", default="", choices=["", "fp8", "gptq", "gptq8", "awq", "w4a16"])
    ap.add_argument("--group-size", type=int, default=INT4_GROUP,
                    help="input columns per scale of --quant gptq/gptq8/awq/w4a16 (96: one group per row of the "
                         "hidden-size projections, which lightwave's grouped MoE kernel serves)")
    a = ap.parse_args()
    if a.group_size <= 0 or a.group_size % 8:
        ap.error(f"--group-size {a.group_size}: a positive multiple of 8")
    INT4_GROUP = a.group_size
    cfgs = configs()
    archs = a.arch.split(",") if a.arch else list(cfgs)
    root = a.keep or tempfile.mkdtemp(prefix="lw_compare_")
    rng = np.random.default_rng(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; bounds: fp32 max |diff| / max |logit| "
          f"<= 1e-4; bf16 ||logits - fp32 logits|| / ||fp32 logits|| <= 1.5 x transformers' own; "
          f"greedy {GREEDY} tokens identical in fp32; lightwave on {a.tp} rank(s) over {a.nnodes} process(es)"
          + (f"; projections in {a.quant} ("
             + (f"{FP8_BLOCK} x {FP8_BLOCK} blocks" if a.quant == "fp8" else f"{8 if a.quant == 'gptq8' else 4}-bit, groups of {INT4_GROUP}")
             + "), transformers on their dequantised values" if a.quant else ""))
    failed = 0
    for arch in archs:
        try:
            line = compare(arch, cfgs[arch], a.lightwave, root, rng, a.tp, a.nnodes, a.quant)
        except Exception as e:  # report and go on to the next architecture
            line = f"FAILED  {type(e).__name__}: {e}"
        failed += not line.startswith("ok")
        print(f"{arch:<10} {line}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
