"""``hqa serve`` under hostile input, on a real uvicorn server on 127.0.0.1: the API key and the body size are
checked before any body byte is read (401 / 413 from the headers alone), 20 concurrent oversized requests are all
refused without reaching the program, a busy port is one line before anything is announced, and every answer
carries its usage.  (Memory under oversized requests is measured by benchmarks/bench_serve.py --oversized.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import dspy
import httpx
from fastapi.testclient import TestClient
from lmkit import UsageLM
from prockit import AGENT_SCRIPT, Recorder, agent_app, serving

from hqa.app import OpenedProgram
from hqa.serve import ServeOptions, create_app

REPO = Path(__file__).resolve().parent.parent.parent
KEY = "s3cret"
CLAIMED = 200 * 1024 * 1024  # what the hostile requests declare: 200 MB
SENT = 96 * 1024  # what they really send before reading the reply (past the 64 KiB cap, within socket buffers)


def open_request(port: int, head: dict[str, str], body: bytes, path: str = "/v1/ask") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1"] + [f"{k}: {v}" for k, v in head.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def status_of(sock: socket.socket) -> int:
    """The status code of the reply on ``sock`` (read until the status line is complete)."""
    data = b""
    with sock:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    return int(data.split(b" ", 2)[1])


def oversized(port: int, key: str | None, chunked: bool = False) -> socket.socket:
    head = {"Content-Type": "application/json"}
    if key:
        head["Authorization"] = f"Bearer {key}"
    if chunked:
        head["Transfer-Encoding"] = "chunked"
        chunk = b"x" * 8192
        body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(SENT // len(chunk)))
        return open_request(port, head, body)
    head["Content-Length"] = str(CLAIMED)
    return open_request(port, head, b"x" * SENT)


def keyed_app() -> tuple[Recorder, object]:
    """A Recorder program served with API key KEY."""
    program = Recorder()
    return program, create_app(OpenedProgram(program, label="rec", kind="rec", source="program"),
                               options=ServeOptions(api_key=KEY))


def test_keyless_requests_get_401_before_the_body_is_read_or_parsed():
    program, app = keyed_app()
    with serving(app) as port:
        # a 200 MB body that never fully arrives: answered from the headers (waiting for it would time out)
        huge = status_of(oversized(port, None))
        huge_wrong_key = status_of(oversized(port, "nope"))
        chunked = status_of(oversized(port, None, chunked=True))
        malformed = httpx.post(f"http://127.0.0.1:{port}/v1/ask", content=b"xxxx",
                               headers={"content-type": "application/json"})
        stream = httpx.post(f"http://127.0.0.1:{port}/v1/ask/stream", content=b"{", timeout=30)
        programs = httpx.get(f"http://127.0.0.1:{port}/v1/programs", timeout=30)
        good = httpx.post(f"http://127.0.0.1:{port}/v1/ask", json={"question": "q"},
                          headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert huge == huge_wrong_key == chunked == 401
    assert malformed.status_code == 401 and "API key" in malformed.json()["error"]  # not 422: never parsed
    assert malformed.headers["www-authenticate"] == "Bearer"
    assert stream.status_code == programs.status_code == 401
    assert good.status_code == 200 and program.asked == ["q"]


def test_oversized_bodies_get_413_before_they_are_read():
    program, app = keyed_app()
    with serving(app) as port:
        declared = status_of(oversized(port, KEY))
        chunked = status_of(oversized(port, KEY, chunked=True))
        just_over = httpx.post(f"http://127.0.0.1:{port}/v1/ask", content=b" " * (64 * 1024 + 1),
                               headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json"})
        # a small chunked body is read (within the cap) and answered as usual
        small = httpx.post(f"http://127.0.0.1:{port}/v1/ask", content=iter([b'{"question": ', b'"q"}']),
                           headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json"})
    assert declared == chunked == 413
    assert just_over.status_code == 413 and "larger than 65536 bytes" in just_over.json()["error"]
    assert small.status_code == 200, small.text
    assert program.asked == ["q"]


def test_twenty_concurrent_oversized_requests_are_all_refused_and_the_server_answers_after():
    program, app = keyed_app()
    with serving(app) as port:
        socks = [oversized(port, KEY if i % 2 else None, chunked=i % 3 == 0) for i in range(20)]
        statuses = [status_of(s) for s in socks]
        after = httpx.post(f"http://127.0.0.1:{port}/v1/ask", json={"question": "after"},
                           headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json()
    assert statuses == [413 if i % 2 else 401 for i in range(20)]
    assert after.status_code == 200 and program.asked == ["after"]
    assert health["served"] == 1 and health["failed"] == 0


def test_busy_port_is_one_line_before_anything_claims_to_serve():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("HQA_API_KEY", None)
        out = subprocess.run([sys.executable, "-m", "hqa.cli", "serve", "--program", "closedbook", "--port",
                              str(port)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr == f"hqa: error: port {port} on 127.0.0.1 is already in use: stop what listens there or " \
                         "pass --port\n"
    assert "serving" not in out.stdout + out.stderr


def test_traced_server_logs_one_trace_per_question_with_lm_spans(settings_for, tmp_path):
    """``hqa serve --trace`` turns DSPy autologging on (tracking.setup): each question becomes one MLflow trace
    whose LM spans are the LM calls the answer's usage counts; the per-request step recorder runs alongside."""
    import mlflow

    from hqa.config import load_settings
    from hqa.tracking import registry as tracking

    store = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path))
    lm = UsageLM(list(AGENT_SCRIPT))
    try:
        tracking.setup(store, autolog=True)
        _agent, app = agent_app(settings_for, lm)
        with TestClient(app) as client:
            r = client.post("/v1/ask", json={"question": "What is the capital of Gabon?"})
        mlflow.flush_trace_async_logging()
        traces = mlflow.search_traces(return_type="list")
    finally:
        mlflow.dspy.autolog(disable=True)
        dspy.configure(lm=None)
    assert r.status_code == 200, r.text
    assert len(traces) == 1
    spans = traces[0].data.spans
    lm_spans = [s for s in spans if s.span_type == "CHAT_MODEL"]
    assert len(lm_spans) == r.json()["usage"]["lm_calls"] == len(AGENT_SCRIPT)
    assert {s.name for s in spans} >= {"SourceMerge.forward", "Predict.forward"}  # the program's modules
