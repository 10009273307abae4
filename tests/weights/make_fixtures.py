"""Writes the checkpoints test_weights reads, with independent references.

GGUF files come from the gguf package's GGUFWriter (quantized with gguf.quants.quantize, the
reference values from gguf.quants.dequantize); safetensors files from the safetensors package.
numpy has no bfloat16 and safetensors.numpy needs ml_dtypes for one, so bf16 tensors go
through the package's own serialize_file with TensorSpec(dtype="bfloat16") instead. 8-bit
(st_scaled), 4-bit (st_int4: GPTQ, AWQ, compressed-tensors) and 8-bit GPTQ (st_gptq8) weights
are quantised here by the formats' published rules; the packed GPTQ/AWQ tensors are unpacked
again element by element and must give the reference values.

usage: make_fixtures.py OUTDIR
"""
import json
import os
import shutil
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import save_file

out = sys.argv[1]
shutil.rmtree(out, ignore_errors=True)
os.makedirs(os.path.join(out, "exp"))
rng = np.random.default_rng()  # fresh values every run
manifest = {}


def expect(ckpt, name, shape, type_name, values):
    """Stores the reference values of a tensor: float32 for float types, int64 for integers."""
    base = f"exp/{ckpt.replace('/', '_')}__{name}"
    if np.issubdtype(values.dtype, np.integer):
        path = base + ".i64"
        values.astype("<i8").tofile(os.path.join(out, path))
    else:
        path = base + ".f32"
        values.astype("<f4").tofile(os.path.join(out, path))
    manifest.setdefault(ckpt, {})[name] = {"shape": list(shape), "type": type_name, "expected": path}


def randf(shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (no NaNs in these inputs)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


# --- GGUF ----------------------------------------------------------------------------------
# Byte offsets of each K-quant block's fp16 scale fields (ggml-common.h: d, and dmin where the
# format has one).
K_QUANT_SCALES = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def k_quant_blocks(kind, shape):
    """Random K-quant blocks [rows, bytes] with finite scales of a trained model's size."""
    rows, cols = shape
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[Q[kind]]
    raw = rng.integers(0, 256, size=(rows, cols // block_elems, block_bytes), dtype=np.uint8)
    for off in K_QUANT_SCALES[kind]:
        scale = (rng.random((rows, cols // block_elems)) * 0.01 + 0.001).astype(np.float16)
        raw[:, :, off:off + 2] = scale.view(np.uint8).reshape(rows, cols // block_elems, 2)
    return raw.reshape(rows, -1)


def write_gguf(path, ckpt, tensors, extra_kv=None, alignment=None):
    w = gguf.GGUFWriter(os.path.join(out, path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for k, (v, t, sub) in (extra_kv or {}).items():
        w.add_key_value(k, v, t, sub_type=sub)
    for name, kind, shape in tensors:
        x = randf(shape, scale=0.5 + rng.random())
        if kind == "F32":
            w.add_tensor(name, x)
            expect(ckpt, name, shape, kind, x)
        elif kind == "F16":
            h = x.astype(np.float16)
            w.add_tensor(name, h)
            expect(ckpt, name, shape, kind, h.astype(np.float32))
        elif kind in ("BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
            qt = Q[kind]
            q = gguf.quants.quantize(x, qt)
            w.add_tensor(name, q, raw_dtype=qt)
            expect(ckpt, name, shape, kind, gguf.quants.dequantize(q, qt).astype(np.float32))
        elif kind in ("I8", "I32", "I64"):
            dt = {"I8": np.int8, "I32": np.int32, "I64": np.int64}[kind]
            info = np.iinfo(dt)
            lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
            v = rng.integers(lo, hi, size=shape, endpoint=True).astype(dt)
            w.add_tensor(name, v)
            expect(ckpt, name, shape, kind, v)
        elif kind in K_QUANT_SCALES:
            # gguf cannot quantize K-quants: random blocks whose fp16 scales are set to finite
            # values, dequantized by gguf.
            raw = k_quant_blocks(kind, shape)
            w.add_tensor(name, raw, raw_dtype=Q[kind])
            expect(ckpt, name, shape, kind, gguf.quants.dequantize(raw, Q[kind]).astype(np.float32))
        elif kind == "IQ4_NL":
            # A type lightwave does not load: random blocks, listed but refused.
            rows, cols = shape
            raw = rng.integers(0, 256, size=(rows, cols // 32 * 18), dtype=np.uint8)
            w.add_tensor(name, raw, raw_dtype=Q.IQ4_NL)
            manifest.setdefault(ckpt, {})[name] = {"shape": list(shape), "type": kind, "expected": None}
        else:
            raise ValueError(kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


metadata = {
    "test.u8": (200, V.UINT8, None),
    "test.i8": (-100, V.INT8, None),
    "test.u16": (60000, V.UINT16, None),
    "test.i16": (-30000, V.INT16, None),
    "test.u32": (4000000000, V.UINT32, None),
    "test.i32": (-2000000000, V.INT32, None),
    "test.f32": (0.15625, V.FLOAT32, None),
    "test.bool": (True, V.BOOL, None),
    "test.string": ("héllo wörld", V.STRING, None),
    "test.u64": (2**63 + 5, V.UINT64, None),
    "test.i64": (-(2**62) - 3, V.INT64, None),
    "test.f64": (2.718281828459045, V.FLOAT64, None),
    "test.str_array": (["a", "", "tokén", "<|end|>"], V.ARRAY, V.STRING),
    "test.i32_array": ([1, -2, 2147483647, -2147483648], V.ARRAY, V.INT32),
    "test.u8_array": ([0, 7, 255], V.ARRAY, V.UINT8),
    "test.f32_array": ([0.5, -1.25, 3.0], V.ARRAY, V.FLOAT32),
    "test.nested": ([[1, 2], [3, 4, 5]], V.ARRAY, V.ARRAY),
    "llama.context_length": (2048, V.UINT32, None),
}
gguf_tensors = [
    ("token_embd.weight", "Q8_0", (7, 64)),
    ("f32.r1", "F32", (37,)),
    ("f32.r3", "F32", (3, 5, 7)),
    ("f16.r2", "F16", (5, 9)),
    ("bf16.r3", "BF16", (3, 5, 7)),
    ("q8_0.r1", "Q8_0", (96,)),
    ("q8_0.r3", "Q8_0", (3, 5, 32)),
    ("q4_0.r2", "Q4_0", (11, 64)),
    ("q4_0.r3", "Q4_0", (3, 3, 32)),
    ("q4_1.r1", "Q4_1", (32,)),
    ("i8.r1", "I8", (13,)),
    ("i32.r2", "I32", (3, 5)),
    ("i64.r1", "I64", (7,)),
    ("q5_0.r2", "Q5_0", (3, 64)),
    ("q5_1.r2", "Q5_1", (5, 32)),
    ("q2_k.r2", "Q2_K", (3, 256)),
    ("q3_k.r2", "Q3_K", (2, 512)),
    ("q4_k.r2", "Q4_K", (3, 256)),
    ("q5_k.r2", "Q5_K", (2, 256)),
    ("q6_k.r2", "Q6_K", (3, 512)),
    ("blk.0.ffn_down.weight", "IQ4_NL", (3, 64)),
    ("blk.0.attn_q.weight", "Q4_1", (9, 96)),  # last: truncating the file cuts into it
]
write_gguf("model.gguf", "model.gguf", gguf_tensors, metadata)
# One [13, K] matrix per block format the linear kernels take: K spans more 16-element runs than
# a 64-lane warp has lanes, and 13 rows leave a partial block of warps.
write_gguf("linear.gguf", "linear.gguf",
           [(f"w.{k.lower()}", k, (13, 1536 if k in K_QUANT_SCALES else 1280))
            for k in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")])
write_gguf("aligned64.gguf", "aligned64.gguf",
           [("a", "F32", (3,)), ("b", "Q4_0", (5, 32)), ("c", "F16", (3,))], alignment=64)


# --- safetensors ---------------------------------------------------------------------------
def st_tensor(ckpt, name, kind, shape):
    """A tensor for a safetensors file: (TensorSpec dtype, array), with its reference."""
    if kind in ("F32", "F16", "F64"):
        dt = {"F32": np.float32, "F16": np.float16, "F64": np.float64}[kind]
        x = randf(shape).astype(dt)
        if kind != "F64":
            expect(ckpt, name, shape, kind, x.astype(np.float32))
        else:
            manifest.setdefault(ckpt, {})[name] = {"shape": list(shape), "type": kind, "expected": None}
        return x.dtype.name, x
    if kind == "BF16":
        b = to_bf16_bits(randf(shape))
        expect(ckpt, name, shape, kind, bf16_bits_to_f32(b))
        return "bfloat16", b
    dt = {"I8": np.int8, "I32": np.int32, "I64": np.int64}[kind]
    v = rng.integers(np.iinfo(dt).min // 2, np.iinfo(dt).max // 2, size=shape).astype(dt)
    expect(ckpt, name, shape, kind, v)
    return v.dtype.name, v


def write_st(path, ckpt, tensors, metadata=None):
    arrays = {name: st_tensor(ckpt, name, kind, shape) for name, kind, shape in tensors}
    full = os.path.join(out, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    if all(dt != "bfloat16" for dt, _ in arrays.values()):
        save_file({k: a for k, (_, a) in arrays.items()}, full, metadata=metadata)
        return
    arrays = {k: (dt, np.ascontiguousarray(a)) for k, (dt, a) in arrays.items()}
    specs = {k: TensorSpec(dtype=dt, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
             for k, (dt, a) in arrays.items()}
    serialize_file(specs, full, metadata=metadata)


write_st("st_single/model.safetensors", "st_single", [
    ("model.embed_tokens.weight", "BF16", (11, 16)),
    ("f32.r2", "F32", (3, 5)),
    ("f16.r1", "F16", (7,)),
    ("bf16.r3", "BF16", (2, 3, 5)),
    ("i8.r1", "I8", (9,)),
    ("i32.r2", "I32", (2, 3)),
    ("i64.r1", "I64", (4,)),
    ("f64.r1", "F64", (3,)),
], metadata={"format": "pt"})

shards = {
    "model-00001-of-00002.safetensors": [("a.weight", "F32", (5, 7)), ("b.weight", "BF16", (3, 11))],
    "model-00002-of-00002.safetensors": [("c.weight", "F16", (13,)), ("d.ids", "I64", (5,))],
}
weight_map = {}
for shard, ts in shards.items():
    write_st(f"st_sharded/{shard}", "st_sharded", ts, metadata={"format": "pt"})
    weight_map.update({name: shard for name, _, _ in ts})
with open(os.path.join(out, "st_sharded/model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)

# The same index with its second shard missing.
os.makedirs(os.path.join(out, "st_missing_shard"))
shutil.copy(os.path.join(out, "st_sharded/model-00001-of-00002.safetensors"), os.path.join(out, "st_missing_shard"))
shutil.copy(os.path.join(out, "st_sharded/model.safetensors.index.json"), os.path.join(out, "st_missing_shard"))

# --- 8-bit weights with scales (FP8 E4M3, INT8) ---------------------------------------------
# Quantised as the formats' publishers describe it (DeepSeek-V3 / Hugging Face fp8: a block's
# scale is its absolute maximum / 448, values rounded to e4m3fn by ml_dtypes; compressed-tensors
# int8: per-row absolute maximum / 127, rounded to nearest). The reference values are ml_dtypes'
# decoding times the scale in float32. Blocks of 32 x 32 here (the loader takes the size from
# the config; 128 x 128 in the published checkpoints), with partial blocks on both edges.
import ml_dtypes  # noqa: E402

E4M3 = ml_dtypes.float8_e4m3fn
FP8_BLOCK = 32


def fp8_quantise(w, rows, cols):
    """w [N, K] float32 -> (e4m3 bytes, scales [ceil(N/rows), ceil(K/cols)] float32)."""
    n, k = w.shape
    sn, sk = -(-n // rows), -(-k // cols)
    scales = np.zeros((sn, sk), np.float32)
    q = np.zeros((n, k), E4M3)
    for i in range(sn):
        for j in range(sk):
            blk = w[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols]
            s = np.float32(np.abs(blk).max() / 448.0)
            scales[i, j] = s
            q[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols] = (blk / s).astype(E4M3)
    return q, scales


def fp8_values(q, scales, rows, cols):
    n, k = q.shape
    s = np.repeat(np.repeat(scales, rows, axis=0), cols, axis=1)[:n, :k]
    return (q.astype(np.float32) * s).astype(np.float32)


scaled = {}  # name -> (safetensors dtype, array, shape)


def add_scaled(name, data_dtype, data, scale_name, scale_dtype, scale, values):
    # (np.ascontiguousarray makes a 0-d array 1-d: the shape is kept apart)
    scaled[name] = (data_dtype, np.ascontiguousarray(data), data.shape)
    if scale is not None:
        scaled[scale_name] = (scale_dtype, np.ascontiguousarray(scale), scale.shape)
    if values is not None:
        expect("st_scaled", name, data.shape, "F8_E4M3" if data_dtype == "float8_e4m3fn" else "I8", values)


def bits_of(a):
    """The bytes of an ml_dtypes / numpy array as uint8 (serialize_file reads raw memory)."""
    return a.view(np.uint8)


# Block-wise (weight_scale_inv), partial blocks on both edges.
w = randf((72, 80))
q, s = fp8_quantise(w, FP8_BLOCK, FP8_BLOCK)
add_scaled("block.weight", "float8_e4m3fn", bits_of(q), "block.weight_scale_inv", "float32", s,
           fp8_values(q, s, FP8_BLOCK, FP8_BLOCK))
# One scale (compressed-tensors "tensor"), stored as a 0-d float32 tensor; and as bf16 [1]
# (its scale rounded to bf16 first, with headroom below 448).
w = randf((24, 48))
q, s = fp8_quantise(w, 24, 48)
add_scaled("tensor.weight", "float8_e4m3fn", bits_of(q), "tensor.weight_scale", "float32", s.reshape(()),
           fp8_values(q, s, 24, 48))
w = randf((24, 48))
sb = to_bf16_bits(np.array([np.abs(w).max() / 400.0], np.float32))
s = bf16_bits_to_f32(sb).reshape(1, 1)
q = (w / s[0, 0]).astype(E4M3)
add_scaled("tensor1.weight", "float8_e4m3fn", bits_of(q), "tensor1.weight_scale", "bfloat16", sb,
           fp8_values(q, s, 24, 48))
# One scale per output row (compressed-tensors "channel": weight_scale [N, 1]).
w = randf((40, 48))
q, s = fp8_quantise(w, 1, 48)
add_scaled("channel.weight", "float8_e4m3fn", bits_of(q), "channel.weight_scale", "float32", s,
           fp8_values(q, s, 1, 48))
# int8 per row, and int8 with one scale.
for name, rows in (("int8", 1), ("int8t", 24)):
    w = randf((24, 48))
    amax = np.abs(w).reshape(24 // rows, -1).max(axis=1).astype(np.float32)
    s = (amax / np.float32(127)).astype(np.float32)
    srow = np.repeat(s, rows)
    qi = np.clip(np.rint(w / srow[:, None]), -127, 127).astype(np.int8)
    add_scaled(f"{name}.weight", "int8", qi, f"{name}.weight_scale", "float32",
               s.reshape(24, 1) if rows == 1 else s.reshape(1), (qi.astype(np.float32) * srow[:, None]).astype(np.float32))
# Refused: no scale; a NaN code; scales of the wrong block shape; a NaN scale.
q, s = fp8_quantise(randf((8, 16)), 8, 16)
add_scaled("noscale.weight", "float8_e4m3fn", bits_of(q), None, None, None, None)
qn = bits_of(q).copy()
qn[3, 5] = 0x7F
add_scaled("nan.weight", "float8_e4m3fn", qn, "nan.weight_scale", "float32", s.reshape(()), None)
add_scaled("badblock.weight", "float8_e4m3fn", bits_of(q), "badblock.weight_scale_inv", "float32",
           np.ones((5, 5), np.float32), None)
add_scaled("nanscale.weight", "float8_e4m3fn", bits_of(q), "nanscale.weight_scale", "float32",
           np.array([np.nan], np.float32), None)

os.makedirs(os.path.join(out, "st_scaled"))
specs = {k: TensorSpec(dtype=dt, shape=list(shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
         for k, (dt, a, shape) in scaled.items()}
serialize_file(specs, os.path.join(out, "st_scaled/model.safetensors"), metadata={"format": "pt"})

# --- 4-bit weights with group scales (GPTQ, AWQ, compressed-tensors pack-quantized) ----------
# The logical weight W [N, K] (out, in), quantised by round to nearest (numpy's rint: ties to
# even) per output row and group of input columns (g_idx[k] is column k's group):
#   asymmetric (GPTQ, AWQ, compressed-tensors with "symmetric": false): s = (max - min) / 15
#     over the group's values, rounded to the stored scale dtype (s = 1 where that is 0);
#     z = clamp(rint(-min / s), 0, 15) with the stored s (GPTQ v1: clamped to 1..15, since it
#     stores z - 1 in four bits);
#     q = clamp(rint(w / s) + z, 0, 15);
#   symmetric GPTQ: s = amax / 7, z = 8; compressed-tensors: s = amax / 7.5 (llm-compressor's
#     symmetric range, amax / ((7 - (-8)) / 2)), signed q = clamp(rint(w / s), -8, 7), stored as
#     q + 8 (so also z = 8, q = clamp(rint(w / s) + 8, 0, 15)).
# The reference values are (q - z) * s in float32 with s the stored scale as float32. The packed
# tensors (int32 words, eight 4-bit values each, value j at bits 4j..4j+3 unless reordered):
#   GPTQ (AutoGPTQ / GPTQModel): qweight [K/8, N] packed along K, qzeros [G, N/8] packed along N
#     (format "gptq": z - 1 stored; "gptq_v2": z), scales f16 [G, N], g_idx i32 [K];
#   AWQ (AutoAWQ GEMM): qweight [K, N/8] and qzeros [G, N/8] packed along N with nibble i holding
#     column 8c + AWQ_ORDER[i]; scales f16 [G, N]; w = (q - z) * s;
#   compressed-tensors pack-quantized: weight_packed [N, K/8] packed along K, weight_scale f16 or
#     bf16 [N, G] ([N, 1] for strategy "channel"), weight_shape i64 [2] = [N, K]; asymmetric:
#     weight_zero_point [ceil(N/8), G] packed along N (the signed zero point + 8, which is z;
#     rows past N zero), as compressed-tensors' pack_to_int32(zero_point, 4, packed_dim=0).
# Every case is unpacked again by int4_unpack, written from the layouts above element by
# element, and must give the reference values exactly.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def int4_g_idx(k, group_size, perm=None):
    """The group of each of the K input columns: k // g, or with act order (perm, a permutation
    of K) g_idx[perm[i]] = i // g. group_size -1: one group of K columns."""
    g = k if group_size == -1 else group_size
    g_idx = np.empty(k, np.int32)
    g_idx[np.arange(k) if perm is None else perm] = np.arange(k) // g
    return g_idx


def round_scale(s, scale_dtype):
    """float32 scales -> (as stored: float16 array or bfloat16 bits, their float32 values)."""
    if scale_dtype == "float16":
        stored = s.astype(np.float16)
        f = stored.astype(np.float32)
    else:
        stored = to_bf16_bits(s)
        f = bf16_bits_to_f32(stored)
    if (f == 0).any():  # a constant group (or one below the dtype's range): scale 1
        return round_scale(np.where(f == 0, np.float32(1), s).astype(np.float32), scale_dtype)
    return stored, f


def int4_quantise(w, g_idx, sym_div=None, scale_dtype="float16", zero_min=0, bits=4):
    """w [N, K] float32 quantised per (row, group) over the group's own (possibly scattered)
    columns to `bits` bits (maxq = 2^bits - 1). sym_div: None for asymmetric, else the divisor of
    amax (7 or 7.5 at 4 bits) with zero 2^(bits - 1). Returns q [N, K] (0..maxq), z [G, N], the
    scales as stored [G, N] and as float32 [G, N], and the reference values [N, K]."""
    maxq, mid = 2 ** bits - 1, 2 ** (bits - 1)
    n, k = w.shape
    groups = int(g_idx.max()) + 1
    q = np.zeros((n, k), np.int64)
    z = np.zeros((groups, n), np.int64)
    stored = np.zeros((groups, n), np.float16 if scale_dtype == "float16" else np.uint16)
    s32 = np.zeros((groups, n), np.float32)
    for grp in range(groups):
        cols = np.flatnonzero(g_idx == grp)
        blk = w[:, cols]
        if sym_div is None:
            lo, hi = blk.min(axis=1), blk.max(axis=1)
            st, s = round_scale(((hi - lo) / np.float32(maxq)).astype(np.float32), scale_dtype)
            zg = np.clip(np.rint(-lo / s), zero_min, maxq).astype(np.int64)
        else:
            st, s = round_scale((np.abs(blk).max(axis=1) / np.float32(sym_div)).astype(np.float32), scale_dtype)
            zg = np.full(n, mid, np.int64)
        q[:, cols] = np.clip(np.rint(blk / s[:, None]) + zg[:, None], 0, maxq).astype(np.int64)
        z[grp], s32[grp], stored[grp] = zg, s, st
    values = ((q - z[g_idx].T).astype(np.float32) * s32[g_idx].T).astype(np.float32)
    # Within one step of the weight: a wrong group or scale shows here before any packing.
    assert np.all(np.abs(values - w) <= s32[g_idx].T * np.float32(1.01)), "quantisation error above one step"
    return q, z, stored, s32, values


def pack_nibbles(a, order=tuple(range(8))):
    """a [R, C] of 0..15 -> int32 [R, C/8]: bits 4i..4i+3 of word [r, c] hold a[r, 8c + order[i]]."""
    r, c = a.shape
    a = a.astype(np.uint32).reshape(r, c // 8, 8)[:, :, list(order)]
    words = np.zeros((r, c // 8), np.uint32)
    for i in range(8):
        words |= a[:, :, i] << np.uint32(4 * i)
    return words.view(np.int32)


def nibble(word, j):
    return (int(word) >> (4 * j)) & 15


def scale_f32(t, dtype):
    return np.float32(t) if dtype == "float16" else bf16_bits_to_f32(np.array([t], np.uint16))[0]


def int4_unpack(method, t, n, k, group_size, checkpoint_format="", scale_dtype="float16"):
    """The dequantised [N, K] of one case's tensors t, element by element from the layouts."""
    out = np.full((n, k), np.nan, np.float32)
    g = k if group_size == -1 else group_size
    if method == "gptq":
        qweight, qzeros, scales, g_idx = t["qweight"], t["qzeros"], t["scales"], t["g_idx"]
        for kk in range(k):
            grp = int(g_idx[kk])
            for nn in range(n):
                q = nibble(qweight[kk // 8, nn], kk % 8)
                zero = nibble(qzeros[grp, nn // 8], nn % 8) + (1 if checkpoint_format == "gptq" else 0)
                out[nn, kk] = np.float32(q - zero) * np.float32(scales[grp, nn])
    elif method == "awq":
        qweight, qzeros, scales = t["qweight"], t["qzeros"], t["scales"]
        for kk in range(k):
            for c in range(n // 8):
                for i in range(8):
                    nn = 8 * c + AWQ_ORDER[i]
                    q, zero = nibble(qweight[kk, c], i), nibble(qzeros[kk // g, c], i)
                    out[nn, kk] = np.float32(q - zero) * np.float32(scales[kk // g, nn])
    else:
        packed, scale, zp = t["weight_packed"], t["weight_scale"], t.get("weight_zero_point")
        assert list(t["weight_shape"]) == [n, k]
        for nn in range(n):
            for kk in range(k):
                zero = 8 if zp is None else nibble(zp[nn // 8, kk // g], nn % 8)
                q = nibble(packed[nn, kk // 8], kk % 8) - zero
                out[nn, kk] = np.float32(q) * scale_f32(scale[nn, kk // g], scale_dtype)
    assert not np.isnan(out).any()
    return out


int4 = {}  # name -> (safetensors dtype, array, shape)


def int4_case(prefix, method, n, k, group_size, sym=False, desc_act=False, checkpoint_format="",
              scale_dtype="float16", corrupt=None):
    """Quantises a random [N, K] weight into one format's tensors under prefix and records the
    reference values (or, with corrupt, breaks one tensor and records no values)."""
    w = randf((n, k))
    perm = rng.permutation(k) if desc_act else None
    g_idx = int4_g_idx(k, group_size, perm)
    if method == "compressed-tensors":
        q, z, stored, s32, values = int4_quantise(w, g_idx, 7.5 if sym else None, scale_dtype)
        t = {"weight_packed": pack_nibbles(q), "weight_scale": np.ascontiguousarray(stored.T),
             "weight_shape": np.array([n, k], np.int64)}
        if not sym:
            zp = np.zeros((z.shape[0], (n + 7) // 8 * 8), np.int64)
            zp[:, :n] = z
            t["weight_zero_point"] = np.ascontiguousarray(pack_nibbles(zp).T)
    elif method == "gptq":
        q, z, stored, s32, values = int4_quantise(w, g_idx, 7 if sym else None, scale_dtype,
                                                  zero_min=1 if checkpoint_format == "gptq" else 0)
        t = {"qweight": np.ascontiguousarray(pack_nibbles(q).T),
             "qzeros": pack_nibbles(z - 1 if checkpoint_format == "gptq" else z), "scales": stored, "g_idx": g_idx}
    else:
        q, z, stored, s32, values = int4_quantise(w, g_idx, None, scale_dtype)
        t = {"qweight": pack_nibbles(np.ascontiguousarray(q.T), AWQ_ORDER), "qzeros": pack_nibbles(z, AWQ_ORDER),
             "scales": stored}
    if sym and method == "gptq" and checkpoint_format == "gptq":
        assert np.all(t["qzeros"].view(np.uint32) == 0x77777777)  # symmetric v1 stores 7 everywhere
    name = prefix + ".weight"
    if corrupt is None:
        got = int4_unpack(method, t, n, k, group_size, checkpoint_format, scale_dtype)
        assert np.array_equal(got, values), f"{prefix}: the packed tensors do not unpack to the reference"
        expect("st_int4", name, (n, k), "int4", values)
    else:
        corrupt(t, int(g_idx.max()) + 1)
        manifest.setdefault("st_int4", {})[name] = {"shape": [n, k], "type": "int4", "expected": None}
    manifest["st_int4"][name].update({"method": method, "bits": 4, "group_size": group_size, "sym": sym,
                                      "desc_act": desc_act, "checkpoint_format": checkpoint_format,
                                      "prefix": prefix})
    for suffix, a in t.items():
        dt = "bfloat16" if a.dtype == np.uint16 else a.dtype.name
        int4[f"{prefix}.{suffix}"] = (dt, np.ascontiguousarray(a), a.shape)


int4_case("gptq_asym_g128", "gptq", 48, 256, 128, checkpoint_format="gptq")
int4_case("gptq_sym_g32", "gptq", 40, 96, 32, sym=True, checkpoint_format="gptq")
int4_case("gptq_act_g64", "gptq", 64, 320, 64, desc_act=True, checkpoint_format="gptq")
int4_case("gptq_channel", "gptq", 24, 136, -1, checkpoint_format="gptq")
int4_case("gptq_v2_g64", "gptq", 32, 192, 64, checkpoint_format="gptq_v2")
int4_case("awq_g128", "awq", 64, 256, 128)
int4_case("awq_g64", "awq", 40, 128, 64)
int4_case("ct_g128", "compressed-tensors", 48, 256, 128, sym=True)
int4_case("ct_channel_bf16", "compressed-tensors", 24, 64, -1, sym=True, scale_dtype="bfloat16")
int4_case("ct_asym_g64", "compressed-tensors", 40, 192, 64)
int4_case("ct_asym_channel_bf16", "compressed-tensors", 20, 64, -1, scale_dtype="bfloat16")


# Refused: qweight one packed row short of K/8; scales one group short; a g_idx value of G.
def truncate(key):
    def f(t, groups):
        t[key] = t[key][:-1]
    return f


def bad_gidx(t, groups):
    t["g_idx"] = t["g_idx"].copy()
    t["g_idx"][5] = groups


int4_case("bad_qweight", "gptq", 16, 64, 32, checkpoint_format="gptq", corrupt=truncate("qweight"))
int4_case("bad_scales", "gptq", 16, 64, 32, checkpoint_format="gptq", corrupt=truncate("scales"))
int4_case("bad_gidx", "gptq", 16, 64, 32, checkpoint_format="gptq", corrupt=bad_gidx)

os.makedirs(os.path.join(out, "st_int4"))
specs = {k: TensorSpec(dtype=dt, shape=list(shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
         for k, (dt, a, shape) in int4.items()}
serialize_file(specs, os.path.join(out, "st_int4/model.safetensors"), metadata={"format": "pt"})

# --- 8-bit GPTQ -------------------------------------------------------------------------------
# AutoGPTQ / GPTQModel with bits 8, quantised as above with maxq 255: asymmetric s = (max - min)
# / 255, z = clamp(rint(-min / s), 0 or 1 (v1), 255); symmetric (AutoGPTQ's sym) s = 2 amax / 255
# with zero 128. qweight [K/4, N]: byte i of word [r, n] holds column 4r + i; qzeros [G, N/4]:
# byte i of word [g, c] holds row 4c + i (z - 1 in format "gptq", z in "gptq_v2"); scales f16
# [G, N]; g_idx i32 [K]. Unpacked again byte by byte from that description; every case loads as
# int8 with group scales (zero points where asymmetric, columns sorted by group in act order).
def pack_bytes(a):
    """a [R, C] of 0..255 -> int32 [R, C/4]: bits 8i..8i+7 of word [r, c] hold a[r, 4c + i]."""
    r, c = a.shape
    a = a.astype(np.uint32).reshape(r, c // 4, 4)
    words = np.zeros((r, c // 4), np.uint32)
    for i in range(4):
        words |= a[:, :, i] << np.uint32(8 * i)
    return words.view(np.int32)


def gptq8_unpack(t, n, k, checkpoint_format):
    out = np.full((n, k), np.nan, np.float32)
    for kk in range(k):
        grp = int(t["g_idx"][kk])
        for nn in range(n):
            q = (int(t["qweight"][kk // 4, nn]) >> (8 * (kk % 4))) & 255
            zero = ((int(t["qzeros"][grp, nn // 4]) >> (8 * (nn % 4))) & 255) + (1 if checkpoint_format == "gptq" else 0)
            out[nn, kk] = np.float32(q - zero) * np.float32(t["scales"][grp, nn])
    assert not np.isnan(out).any()
    return out


gptq8 = {}


def gptq8_case(prefix, n, k, group_size, sym=False, desc_act=False, checkpoint_format="gptq", corrupt=None):
    w = randf((n, k))
    g_idx = int4_g_idx(k, group_size, rng.permutation(k) if desc_act else None)
    q, z, stored, s32, values = int4_quantise(w, g_idx, 127.5 if sym else None, "float16",
                                              zero_min=1 if checkpoint_format == "gptq" else 0, bits=8)
    t = {"qweight": np.ascontiguousarray(pack_bytes(q).T),
         "qzeros": pack_bytes(z - 1 if checkpoint_format == "gptq" else z), "scales": stored, "g_idx": g_idx}
    if sym:
        assert np.all(z == 128)
    name = prefix + ".weight"
    if corrupt is None:
        assert np.array_equal(gptq8_unpack(t, n, k, checkpoint_format), values), prefix
        expect("st_gptq8", name, (n, k), "gptq8", values)
    else:
        corrupt(t, int(g_idx.max()) + 1)
        manifest.setdefault("st_gptq8", {})[name] = {"shape": [n, k], "type": "gptq8", "expected": None}
    manifest["st_gptq8"][name].update({"method": "gptq", "bits": 8, "group_size": group_size, "sym": sym,
                                       "desc_act": desc_act, "checkpoint_format": checkpoint_format})
    for suffix, a in t.items():
        gptq8[f"{prefix}.{suffix}"] = (a.dtype.name, np.ascontiguousarray(a), a.shape)


gptq8_case("gptq8_sym_g32", 40, 96, 32, sym=True)
gptq8_case("gptq8_sym_channel_v2", 24, 136, -1, sym=True, checkpoint_format="gptq_v2")
gptq8_case("gptq8_sym_g64_tail", 32, 208, 64, sym=True)  # a last group of 16 columns
gptq8_case("gptq8_asym_g64", 32, 192, 64)
gptq8_case("gptq8_act_g32", 48, 128, 32, sym=True, desc_act=True)
# Groups of 40 (zero points and scales change inside a 16-column run), v2 zero points, act order.
gptq8_case("gptq8_asym_act_g40_v2", 24, 160, 40, desc_act=True, checkpoint_format="gptq_v2")
# Stacking partners: symmetric beside gptq8_asym_g64 (zero points for one part only), another
# column order beside gptq8_act_g32 (parts that cannot share one).
gptq8_case("gptq8_sym_g64", 16, 192, 64, sym=True)
gptq8_case("gptq8_act2_g32", 16, 128, 32, sym=True, desc_act=True)
gptq8_case("bad8_qweight", 16, 64, 32, sym=True, corrupt=truncate("qweight"))
gptq8_case("bad8_zeros", 16, 64, 32, sym=True, corrupt=truncate("qzeros"))
gptq8_case("bad8_gidx", 16, 64, 32, sym=True, corrupt=bad_gidx)

os.makedirs(os.path.join(out, "st_gptq8"))
specs = {k: TensorSpec(dtype=dt, shape=list(shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
         for k, (dt, a, shape) in gptq8.items()}
serialize_file(specs, os.path.join(out, "st_gptq8/model.safetensors"), metadata={"format": "pt"})

with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
print(f"wrote fixtures to {out}")
