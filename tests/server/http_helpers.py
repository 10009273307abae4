"""What the server tests share: a free local port, one HTTP request, a /metrics scrape."""
import json
import socket
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, body=None, raw=None, headers=None, timeout=120, with_headers=False):
    """One request to 127.0.0.1:port with `headers` as given: body is sent as JSON, raw as bytes.
    Returns (status, text), or (status, text, headers) with with_headers; HTTP errors are answers."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        out = e.code, e.read().decode(), dict(e.headers)
    return out if with_headers else out[:2]


def metric_lines(text):
    """The samples of a /metrics text: name (with its labels, if any) -> value."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def metrics(port, headers=None):
    """One /metrics scrape (see metric_lines); {} when it is not answered with 200."""
    status, text = http(port, "GET", "/metrics", headers=headers)
    return metric_lines(text) if status == 200 else {}
