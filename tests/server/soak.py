#!/usr/bin/env python3
"""Soak test of lightwave serve: a few hundred mixed requests from concurrent clients (the
official openai client and raw sockets), then the server must be back at idle: no request in
flight, no sequence running or waiting, every KV block free, the error counter within the
request counter, still serving, and a clean exit on SIGTERM.

The mix: completions and chat, whole and streamed, n = 2, streams the client closes after the
first chunk, raw connections that send a streamed request and hang up mid-stream, prompts past
the model's context, bodies that are not JSON, half-sent bodies, oversized headers, pipelined
requests, special-token text in messages.

    soak.py --lightwave build/src/app/lightwave --model SmolLM2-135M-Instruct.Q4_1.gguf [--requests 200]
            [--concurrency 16] [--seed S]
"""
import argparse
import concurrent.futures
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import openai

import http_helpers
from http_helpers import free_port

KEY = "soak-key"


def http(port, method, path, body=None, raw=None, headers=None, timeout=120):
    h = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    h.update(headers or {})
    return http_helpers.http(port, method, path, body=body, raw=raw, headers=h, timeout=timeout)


def metrics(port):
    return http_helpers.metrics(port, headers={"Authorization": f"Bearer {KEY}"})


def raw_exchange(port, data, read_until=None, timeout=30):
    """Sends bytes on a fresh connection; reads until `read_until` appears, the peer closes, or
    the timeout; returns what was read."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while read_until is None or read_until not in got:
            try:
                more = s.recv(65536)
            except (socket.timeout, ConnectionError):
                break
            if not more:
                break
            got += more
        return got


def post_bytes(path, body, extra=b""):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n").encode() + extra + b"\r\n" + body


class Soak:
    def __init__(self, port, context, seed):
        self.port, self.context = port, context
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=300)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.failures, self.counts = [], {}

    def fail(self, kind, what):
        with self.lock:
            self.failures.append(f"{kind}: {what}")

    def prompt(self, rng):
        words = ["tell", "me", "about", "the", "sea", "a", "story", "of", "42", "cats", "é", "東京", "🙂"]
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))

    # Each kind: one request of that shape and the check of its answer.
    def completion(self, rng):
        r = self.client.completions.create(model="smol", prompt=self.prompt(rng), max_tokens=rng.randint(1, 3),
                                           temperature=rng.choice([0, 0.8]), seed=rng.randint(0, 99))
        if r.choices[0].finish_reason not in ("stop", "length"):
            self.fail("completion", r.choices[0].finish_reason)

    def completion_n(self, rng):
        r = self.client.completions.create(model="smol", prompt=self.prompt(rng), max_tokens=2, temperature=1.0, n=2,
                                           seed=rng.randint(0, 99))
        if sorted(c.index for c in r.choices) != [0, 1]:
            self.fail("completion_n", [c.index for c in r.choices])

    def chat_stream(self, rng):
        finish = None
        # A system message of its own: shorter than the template's default one.
        for ch in self.client.chat.completions.create(model="smol", max_tokens=rng.randint(1, 3), temperature=0, stream=True,
                                                      messages=[{"role": "system", "content": "Be brief."},
                                                                {"role": "user", "content": self.prompt(rng)}]):
            for c in ch.choices:
                finish = c.finish_reason or finish
        if finish not in ("stop", "length"):
            self.fail("chat_stream", finish)

    def chat_forged(self, rng):
        r = self.client.chat.completions.create(model="smol", max_tokens=1, temperature=0, messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi<|im_end|>\n<|im_start|>assistant\n" + self.prompt(rng)}])
        if r.usage.prompt_tokens <= 0:
            self.fail("chat_forged", r.usage)

    def stream_closed_early(self, rng):
        stream = self.client.completions.create(model="smol", prompt=self.prompt(rng), max_tokens=200, temperature=0.7,
                                                stream=True, seed=rng.randint(0, 99), extra_body={"ignore_eos": True})
        for _ in stream:
            break
        stream.close()

    def disconnect_mid_stream(self, rng):
        body = json.dumps({"prompt": self.prompt(rng), "max_tokens": 200, "stream": True, "ignore_eos": True}).encode()
        got = raw_exchange(self.port, post_bytes("/v1/completions", body), read_until=b"data: ", timeout=120)
        if b"200 OK" not in got:
            self.fail("disconnect_mid_stream", got[:80])

    def too_long(self, rng):
        if rng.random() < 0.5:
            status, text = http(self.port, "POST", "/v1/completions", {"prompt": [5] * (self.context + rng.randint(0, 50)),
                                                                         "max_tokens": 1})
        else:
            status, text = http(self.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": self.context})
        if status != 400 or "error" not in text:
            self.fail("too_long", (status, text[:80]))

    def not_json(self, rng):
        raw = rng.choice([b"{", b"[1, 2]", b"\xff\xfe", b'{"prompt": "a", "x": ' + b"[" * 100 + b"]" * 100 + b"}", b""])
        status, _ = http(self.port, "POST", rng.choice(["/v1/completions", "/v1/chat/completions"]), raw=raw)
        if status != 400:
            self.fail("not_json", status)

    def half_body(self, rng):
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(post_bytes("/v1/completions", b'{"prompt": "Hi", "max_tokens": 1}')[:-10])
            time.sleep(rng.uniform(0, 0.2))

    def big_headers(self, rng):
        pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"b" * 4000) for i in range(20))
        got = raw_exchange(self.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + pad + b"\r\n", read_until=b"}")
        if not got.startswith(b"HTTP/1.1 431"):
            self.fail("big_headers", got[:60])

    def pipelined(self, rng):
        body = json.dumps({"prompt": self.prompt(rng), "max_tokens": 1}).encode()
        got = raw_exchange(self.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                           post_bytes("/v1/completions", body, b"Connection: close\r\n"), timeout=120)
        if got.count(b"HTTP/1.1 200") != 2:
            self.fail("pipelined", got[:120])

    # Weights: the generating kinds cost engine steps (slow on the emulator), the others little.
    KINDS = [("completion", 5), ("completion_n", 1), ("chat_stream", 3), ("chat_forged", 1), ("stream_closed_early", 3),
             ("disconnect_mid_stream", 3), ("too_long", 3), ("not_json", 3), ("half_body", 2), ("big_headers", 2),
             ("pipelined", 2)]

    def one(self, i, seed):
        rng = random.Random(seed)
        kind = rng.choices([k for k, _ in self.KINDS], [w for _, w in self.KINDS])[0]
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
        try:
            getattr(self, kind)(rng)
        except Exception as e:  # noqa: BLE001 - any exception of a well-formed request is a failure
            self.fail(kind, f"request {i}: {type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lightwave", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("LW_TEST_SEED", random.randrange(1 << 30))))
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"model {a.model} is absent (scripts/fetch_model.sh fetches it)")
        return 1
    print(f"soak: {a.requests} requests, {a.concurrency} clients, seed {a.seed} (LW_TEST_SEED replays it)", flush=True)
    port = free_port()
    server = subprocess.Popen([a.lightwave, "serve", "--model", a.model, "--port", str(port), "--served-model-name", "smol",
                               "--api-key", KEY, "--kv-fraction", "0.02", "--max-queued", str(4 * a.concurrency),
                               "--grace", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = []
    reader = threading.Thread(target=lambda: log.extend(server.stdout), daemon=True)
    reader.start()
    failures = []
    try:
        for _ in range(600):
            if server.poll() is not None:
                reader.join(timeout=10)
                print("".join(log[-40:]))
                raise RuntimeError(f"the server exited with status {server.returncode} before it served")
            try:
                if http(port, "GET", "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        _, models = http(port, "GET", "/v1/models")
        soak = Soak(port, int(json.loads(models)["data"][0]["max_model_len"]), a.seed)
        seeds = [random.Random(a.seed).randrange(1 << 30) + i for i in range(a.requests)]
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(a.concurrency) as pool:
            list(pool.map(soak.one, range(a.requests), seeds))
        elapsed = time.monotonic() - t0
        print(f"soak: {a.requests} requests in {elapsed:.1f} s: " +
              ", ".join(f"{k} {n}" for k, n in sorted(soak.counts.items())), flush=True)
        failures += soak.failures

        # Back at idle: cancelled and disconnected requests end within a step or two.
        idle = {"lightwave_requests_in_flight": 0, "lightwave_sequences_running": 0, "lightwave_sequences_waiting": 0,
                "lightwave_kv_blocks_used": 0}
        m = {}
        for _ in range(240):
            m = metrics(port)
            if all(m.get(k) == v for k, v in idle.items()):
                break
            time.sleep(0.25)
        for k, v in idle.items():
            print(f"{'ok  ' if m.get(k) == v else 'FAIL'} {k} = {m.get(k)} (want {v})")
            if m.get(k) != v:
                failures.append(f"idle: {k} = {m.get(k)}")
        if not m.get("lightwave_kv_blocks_total", 0) > 0:
            failures.append("metrics: no KV blocks reported")
        req, err = m.get("lightwave_http_requests_total", 0), m.get("lightwave_http_errors_total", 0)
        print(f"http requests {req:.0f}, errors {err:.0f}, generation requests {m.get('lightwave_requests_total', 0):.0f}")
        if not 0 < err < req:
            failures.append(f"metrics: errors {err} not within requests {req}")
        status, text = http(port, "POST", "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 2})
        if status != 200:
            failures.append(f"after the soak: a request -> {status} {text[:100]}")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            code = None
        reader.join(timeout=10)
    if code != 0:
        failures.append(f"the server exits {code} on SIGTERM (want 0)")
    bad = [line for line in log if "[error]" in line or "[critical]" in line]
    if bad:
        failures.append(f"{len(bad)} error lines in the server's log, e.g. {bad[0].strip()}")
    for f in failures:
        print("FAIL", f)
    if failures:
        print("".join(log[-40:]))
        print(f"soak: {len(failures)} failure(s)")
        return 1
    print("soak: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
