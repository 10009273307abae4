#!/usr/bin/env python3
"""The torch figures that bench_ops is compared with, measured the same way (CUDA events,
median, two input sets), on the same shapes. Prints a table in bench_ops's format."""
import argparse

import torch
import torch.nn.functional as F


def median_ms(fn, repeats, sets):
    for i in range(sets):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i % sets)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    dt, sets, n = torch.bfloat16, 2, a.rows * a.cols
    x = [torch.rand(a.rows, a.cols, device="cuda", dtype=dt) * 4 - 2 for _ in range(sets)]
    r = [torch.rand(a.rows, a.cols, device="cuda", dtype=dt) * 4 - 2 for _ in range(sets)]
    g = [torch.rand(a.rows, 2 * a.cols, device="cuda", dtype=dt) * 4 - 2 for _ in range(sets)]
    y = [torch.empty(a.rows, a.cols, device="cuda", dtype=dt) for _ in range(sets)]
    w = torch.rand(a.cols, device="cuda", dtype=dt) + 0.5

    def add_rms(i):
        r[i].add_(x[i])
        return F.rms_norm(r[i], (a.cols,), w, 1e-6)

    qh, kh, hd = 32, 8, 128
    qkv = [torch.rand(a.rows, (qh + 2 * kh) * hd, device="cuda", dtype=dt) for _ in range(sets)]
    pos = torch.arange(a.rows, device="cuda") % 8192
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device="cuda").float() / hd))
    freqs = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dt)[:, None, :], emb.sin().to(dt)[:, None, :]

    def rotate_half(t):
        return torch.cat((-t[..., hd // 2 :], t[..., : hd // 2]), dim=-1)

    def rope(i):  # Hugging Face's apply_rotary_pos_emb, written back in place
        q = qkv[i][:, : qh * hd].view(a.rows, qh, hd)
        k = qkv[i][:, qh * hd : (qh + kh) * hd].view(a.rows, kh, hd)
        q.copy_(q * cos + rotate_half(q) * sin)
        k.copy_(k * cos + rotate_half(k) * sin)

    cases = [
        ("copy (reference)", lambda i: y[i].copy_(x[i]), 2),
        ("rms_norm", lambda i: F.rms_norm(x[i], (a.cols,), w, 1e-6), 2),
        ("add_rms_norm (2 ops)", add_rms, 4),
        ("layer_norm", lambda i: F.layer_norm(x[i], (a.cols,), w, w, 1e-5), 2),
        ("softmax", lambda i: torch.softmax(x[i], dim=-1), 2),
        ("silu_mul", lambda i: F.silu(g[i][:, : a.cols]) * g[i][:, a.cols :], 3),
        ("add", lambda i: torch.add(x[i], r[i], out=y[i]), 3),
    ]
    results = [(name, median_ms(fn, a.repeats, sets), passes * n * 2) for name, fn, passes in cases]
    results.append(("rope (q and k, 32+8 heads)", median_ms(rope, a.repeats, sets), 2 * a.rows * (qh + kh) * hd * 2))
    copy_gbs = results[0][2] / (results[0][1] * 1e6)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16 [{a.rows}, {a.cols}], median of {a.repeats}")
    print(f"{'op':<24} {'ms':>10} {'GB/s':>10} {'% copy':>10}")
    for name, ms, nbytes in results:
        gbs = nbytes / (ms * 1e6)
        print(f"{name:<24} {ms:>10.4f} {gbs:>10.0f} {100 * gbs / copy_gbs:>9.1f}%")


if __name__ == "__main__":
    main()
