#!/usr/bin/env python3
"""Connection limits and shutdown of lightwave serve.

caps:     with --max-connections-per-client 4 and --max-connections 8, connections held open by a
          partial request line: one address past its 4 gets 429 at once, the server past its 8
          gets 503 at once (both before sending a whole request), other addresses are still
          served under the total, and a closed connection makes room for a new one.
slow:     1,000 connections from 127.0.0.2-9, each trickling a header byte every 3 s
          (--header-timeout 60); /health, /metrics and a short completion must be answered while
          every one of them is still open. Prints the health latencies with and without them.
shutdown: SIGTERM while an engine step over a long prompt runs (--grace 0): the process exits
          without waiting for the step, saying so in its log.

Ordering conditions only: no check depends on how fast the machine is.

    connections.py --lightwave build/src/app/lightwave --model SmolLM2-135M-Instruct.Q4_1.gguf
                   [--parts caps,slow,shutdown] [--slow 1000]
"""
import argparse
import json
import os
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

from http_helpers import free_port, http, metric_lines, metrics


def connect_from(source, port, first=b""):
    """A connection from the loopback address `source` (Linux accepts any 127.x.y.z) that has
    sent `first`."""
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    if first:
        s.sendall(first)
    return s


def read_answer(s, timeout=30):
    """What the peer sends until it closes (or the timeout)."""
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            more = s.recv(65536)
            if not more:
                break
            got += more
    except (socket.timeout, ConnectionError):
        pass
    return got


def admitted(source, port):
    """A connection from `source` that the server admitted (it answered a whole request on it),
    then held by a partial request line; or None and the refusal."""
    s = connect_from(source, port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while not got.endswith(b"}"):  # the health answer and an error object both end the body with }
        more = s.recv(65536)
        if not more:
            break
        got += more
    if status_of(got) != 200:
        s.close()
        return None, got
    s.sendall(PARTIAL[:9])
    return s, got


def admit(source, port, held):
    """admitted(), retried while a connection the test closed is still counted by the server."""
    for _ in range(300):
        s, got = admitted(source, port)
        if s:
            held.add(s)
            return s
        time.sleep(0.1)
    raise RuntimeError(f"no connection from {source} admitted: {got[:120]!r}")


def closed_by_peer(socks):
    """The sockets the server has answered or closed (readable: data or end of stream)."""
    poller = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return [by_fd[fd] for fd, _ in poller.poll(0)]


class Trickler:
    """Holds connections open, each sending one more header byte every `period` seconds."""

    def __init__(self, period=3.0):
        self.socks, self.period = [], period
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def add(self, s):
        with self.lock:
            self.socks.append(s)

    def remove(self, s):
        with self.lock:
            self.socks.remove(s)
        s.close()

    def run(self):
        while not self.stop.wait(self.period):
            with self.lock:
                socks = list(self.socks)
            for s in socks:
                try:
                    s.send(b"a", socket.MSG_DONTWAIT)
                except OSError:
                    pass  # the server closed it: closed_by_peer sees that

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()
        self.socks = []


class Server:
    def __init__(self, a, *flags, kv_fraction="0.02"):
        self.port = free_port()
        self.proc = subprocess.Popen([a.lightwave, "serve", "--model", a.model, "--port", str(self.port),
                                      "--served-model-name", "smol", "--kv-fraction", kv_fraction, *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log = []
        self.reader = threading.Thread(target=lambda: self.log.extend(self.proc.stdout), daemon=True)
        self.reader.start()
        for _ in range(600):
            try:
                if http(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
            if self.proc.poll() is not None:
                break
        raise RuntimeError("the server did not come up:\n" + "".join(self.log[-20:]))

    def stop(self, timeout=120):
        """SIGTERM, then the exit code (None when it had to be killed) and the seconds it took."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
        self.reader.join(timeout=10)
        return code, time.monotonic() - t0


PARTIAL = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "


def wait_connections(port, want):
    """The server's open-connection gauge once it reads `want` (the scrape's own connection
    included), or its last reading after 30 s."""
    n = None
    for _ in range(300):
        n = metrics(port).get("lightwave_http_connections")
        if n == want:
            break
        time.sleep(0.1)
    return n


def status_of(answer):
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None


def part_caps(a, check):
    srv = Server(a, "--max-connections-per-client", "4", "--max-connections", "8", "--header-timeout", "60")
    held = Trickler()
    try:
        # One address at its cap: the fifth is refused before it sends a byte, another address is
        # served.
        mine = [admit("127.0.0.2", srv.port, held) for _ in range(4)]
        # Until the server has admitted all four (the metrics connection is the fifth).
        n = wait_connections(srv.port, 5)
        check(n == 5, f"caps: 4 held + 1 -> lightwave_http_connections {n} (want 5)")
        fifth = connect_from("127.0.0.2", srv.port)
        got = read_answer(fifth)
        fifth.close()
        check(status_of(got) == 429 and b"Retry-After: 1" in got and b"--max-connections-per-client" in got
              and b"Connection: close" in got, f"caps: a fifth connection from 127.0.0.2 -> {got[:160]!r} (want 429)")
        check(json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["message"] if b"\r\n\r\n" in got else False,
              "caps: the 429 carries an error object")
        check(http(srv.port, "GET", "/health")[0] == 200, "caps: /health from 127.0.0.1 beside a full client")
        check(not closed_by_peer(mine), "caps: the held connections are still open")
        # A closed connection makes room for the address's next one (retried until the server
        # has seen the close).
        held.remove(mine.pop())
        mine.append(admit("127.0.0.2", srv.port, held))
        print("ok   caps: after one of 127.0.0.2's closed, its new connection is admitted", flush=True)

        # The server at its total: 4 from 127.0.0.2 and 4 from 127.0.0.3.
        others = [admit("127.0.0.3", srv.port, held) for _ in range(3)]
        n = wait_connections(srv.port, 8)  # 7 held, the metrics connection the eighth
        check(n == 8, f"caps: 7 held + 1 -> lightwave_http_connections {n} (want 8)")
        others.append(admit("127.0.0.3", srv.port, held))
        s = connect_from("127.0.0.4", srv.port)
        full = read_answer(s)
        s.close()
        check(status_of(full) == 503 and b"Retry-After: 1" in full and b"--max-connections" in full,
              f"caps: a ninth connection -> {full[:160]!r} (want 503)")
        check(not closed_by_peer(mine + others), "caps: the held connections are still open at the total")
        held.remove(others.pop())
        m = {}
        for _ in range(300):  # a refused metrics request is retried until the close has made room
            m = metrics(srv.port)
            if m:
                break
            time.sleep(0.1)
        check(m.get("lightwave_http_connections") == 8, f"caps: after a close, a new connection is admitted "
              f"(lightwave_http_connections {m.get('lightwave_http_connections')}, want 8)")
        refused_client = m.get('lightwave_http_connections_refused_total{limit="client"}', 0)
        refused_server = m.get('lightwave_http_connections_refused_total{limit="server"}', 0)
        check(refused_client >= 1 and refused_server >= 1,
              f"caps: refused connections counted (client {refused_client}, server {refused_server})")
        held.close()
        n = wait_connections(srv.port, 1)
        check(n == 1, f"caps: every connection closed -> lightwave_http_connections {n} (want 1, the metrics "
              f"request's own)")
    finally:
        held.close()
        code, _ = srv.stop()
    check(code == 0, f"caps: the server exits {code} on SIGTERM (want 0)")
    refusals = [line for line in srv.log if " access " in line and " refused=" in line]
    check(any("status=429" in line for line in refusals) and any("status=503" in line for line in refusals),
          f"caps: refusals in the access log ({len(refusals)} lines)")


def part_slow(a, check):
    srv = Server(a, "--header-timeout", "60")
    slow = Trickler()
    try:
        def health_times(n):
            times, statuses = [], []
            for _ in range(n):
                t0 = time.monotonic()
                statuses.append(http(srv.port, "GET", "/health", timeout=300)[0])
                times.append(time.monotonic() - t0)
            check(statuses == [200] * n, f"slow: {n} /health requests -> {sorted(set(statuses))}")
            return times

        def completion():
            t0 = time.monotonic()
            status, text = http(srv.port, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}, timeout=300)
            check(status == 200 and json.loads(text)["choices"][0]["finish_reason"] in ("stop", "length"),
                  f"slow: a completion -> {status} {text[:100]}")
            return time.monotonic() - t0

        completion()  # the first step compiles and warms what later ones reuse
        idle = health_times(30)
        idle_completion = completion()
        socks = []
        t0 = time.monotonic()
        for i in range(a.slow):
            s = connect_from(f"127.0.0.{2 + i % 8}", srv.port, PARTIAL)
            socks.append(s)
            slow.add(s)
        opened = time.monotonic() - t0
        print(f"slow: {a.slow} connections opened in {opened:.1f} s", flush=True)
        loaded = health_times(30)
        status, text = http(srv.port, "GET", "/metrics", timeout=300)
        m = metric_lines(text) if status == 200 else {}
        loaded_completion = completion()
        closed = closed_by_peer(socks)
        check(status == 200, f"slow: /metrics -> {status}")
        check(not closed, f"slow: {len(closed)} of the {a.slow} slow connections were closed by the server before "
              "/health, /metrics and a completion were answered (want none)")
        # Admitted, not waiting in the accept queue: they are served on threads of their own.
        check(m.get("lightwave_http_connections", 0) >= a.slow,
              f"slow: lightwave_http_connections {m.get('lightwave_http_connections')} (want >= {a.slow})")

        def ms(x):
            return f"{1000 * x:.1f}"
        print("| slow connections | /health p50 ms | /health max ms | completion (2 tokens) s |")
        print("|---|---|---|---|")
        print(f"| 0 | {ms(statistics.median(idle))} | {ms(max(idle))} | {idle_completion:.2f} |")
        print(f"| {a.slow} | {ms(statistics.median(loaded))} | {ms(max(loaded))} | {loaded_completion:.2f} |", flush=True)
    finally:
        slow.close()
        code, _ = srv.stop()
    check(code == 0, f"slow: the server exits {code} on SIGTERM (want 0)")


def part_shutdown(a, check):
    # One step over the whole prompt (--max-batch-tokens), on the emulator far longer than the
    # shutdown waits for it (the grace period, 5 s at least, after the 5 s stop margin).
    srv = Server(a, "--grace", "0", "--max-batch-tokens", str(a.long_prompt), kv_fraction="0.2")
    answer = {}

    def long_request():
        try:
            answer["status"], answer["text"] = http(srv.port, "POST", "/v1/completions",
                                                    {"prompt": [5] * a.long_prompt, "max_tokens": 1}, timeout=600)
        except OSError as e:
            answer["error"] = str(e)

    client = threading.Thread(target=long_request, daemon=True)
    client.start()
    m = {}
    for _ in range(600):  # until the loop holds the request (its step then starts)
        m = metrics(srv.port)
        if m.get("lightwave_requests_in_flight") == 1 or not client.is_alive():
            break
        time.sleep(0.1)
    started = m.get("lightwave_requests_in_flight") == 1
    time.sleep(1)
    code, took = srv.stop(timeout=300)
    client.join(timeout=30)
    abandoned = [line for line in srv.log if "engine step is still running" in line]
    print(f"shutdown: exit {code} {took:.1f} s after SIGTERM (request seen in flight: {started}), the request -> "
          f"{answer.get('status', answer.get('error'))} {answer.get('text', '')[:120]}", flush=True)
    check(code == 0, f"shutdown: the server exits {code} (want 0)")
    # The bound holds whatever the step's length: 5 s for requests past the grace period, then at
    # most max(grace, 5 s) for the engine loop; the rest is slack for a loaded machine.
    check(took <= 30, f"shutdown: the server exits {took:.1f} s after SIGTERM (want within 30 s: it waits at most "
          "5 s past the grace period for requests and 5 s for the engine step)")
    if abandoned:
        print("shutdown: the engine step was still running and was abandoned", flush=True)
    else:
        # A machine fast enough to finish the step first: its request must have been answered.
        check(answer.get("status") == 200 and '"finish_reason"' in answer.get("text", ""),
              "shutdown: the step ended before the shutdown stopped waiting, and its request was answered")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lightwave", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--parts", default="caps,slow,shutdown")
    ap.add_argument("--slow", type=int, default=1000, help="slow connections held in the slow part")
    ap.add_argument("--long-prompt", type=int, default=2048, help="prompt tokens of the shutdown part's step")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"model {a.model} is absent (scripts/fetch_model.sh fetches it)")
        return 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.slow + 512
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    failures = []

    def check(ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failures.append(what)

    for part in a.parts.split(","):
        print(f"== {part}", flush=True)
        try:
            {"caps": part_caps, "slow": part_slow, "shutdown": part_shutdown}[part](a, check)
        except Exception as e:  # noqa: BLE001 - a part that cannot finish is a failure
            check(False, f"{part}: {type(e).__name__}: {e}")
    if failures:
        print(f"connections: {len(failures)} failure(s)")
        return 1
    print("connections: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
