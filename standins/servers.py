"""Local server processes on 127.0.0.1: free ports, readiness (a port, an HTTP answer), stopping a server with what
it spawned, and an `oxigraph serve-read-only` over a store.

Used by the tests (tests/prockit.py re-exports the process helpers) and the benchmarks; every server here binds to the
loopback address only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import urllib.error
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen | None = None, seconds: float = 120) -> None:
    """Block until something listens on 127.0.0.1:port; RuntimeError if the process dies or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server process exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {seconds:g}s")


def wait_http(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    """Block until ``url`` answers 200; RuntimeError if the process dies or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not answering after {seconds:g}s")


def stop(proc: subprocess.Popen, grace: float = 5) -> None:
    """Terminate a server started in its own session, with anything it spawned (its process group): SIGTERM, then
    after ``grace`` seconds SIGKILL for the group.  A few seconds suit the tests: an ``mlflow server`` waits on idle
    keep-alive connections (the tests' MLflow client holds some) and never ends by itself."""
    if proc.poll() is not None:
        return
    try:
        if os.getpgid(proc.pid) != proc.pid:  # not started in a session of its own: just the process
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            return
        os.killpg(proc.pid, signal.SIGTERM)  # the leader is alive, so the group id is still ours
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # workers left behind, if any
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


def oxigraph_binary() -> str:
    """The `oxigraph` server from the PyPI package, beside this interpreter (a venv's bin) or on PATH."""
    beside = Path(sys.executable).parent / "oxigraph"
    exe = str(beside) if beside.exists() else shutil.which("oxigraph")
    if not exe:
        raise RuntimeError("the oxigraph server binary (PyPI package 'oxigraph') is not installed")
    return exe


def start_oxigraph(store: Path, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """`oxigraph serve-read-only` over ``store`` on 127.0.0.1; returns (process, SPARQL query URL)."""
    port = port or free_port()
    proc = subprocess.Popen([oxigraph_binary(), "serve-read-only", "--location", str(store), "--bind",
                             f"127.0.0.1:{port}", "--union-default-graph"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, seconds=20)
    except RuntimeError:
        proc.kill()
        raise
    return proc, f"http://127.0.0.1:{port}/query"


class RecordingProxy:
    """A loopback HTTP proxy in front of a real server (``target``, e.g. a ``llama_cpp.server``'s ``http://127.0.0.1:P``):
    every request is forwarded unchanged and its JSON body kept in ``bodies`` (without ``messages``), each reply's
    ``usage`` in ``usages``, so a test or a benchmark sees what hqa really sent while the real server does the work.  ``start()`` serves in a daemon thread; ``stop()``."""

    def __init__(self, target: str):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.target = target.rstrip("/")
        self.bodies: list[dict] = []
        self.usages: list[dict] = []  # each JSON reply's ``usage`` (the server's own token counts)
        self.finishes: list[str | None] = []  # and its first choice's ``finish_reason`` ("length": cut at max_tokens)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _forward(self, data: bytes | None):
                import json as _json

                if data:
                    try:
                        body = _json.loads(data)
                    except ValueError:
                        body = None
                    if isinstance(body, dict):
                        with proxy._lock:
                            proxy.bodies.append({k: v for k, v in body.items() if k != "messages"})
                request = urllib.request.Request(proxy.target + self.path, data=data, method=self.command,
                                                 headers={k: v for k, v in self.headers.items()
                                                          if k.lower() in ("content-type", "authorization")})
                try:
                    with urllib.request.urlopen(request, timeout=600) as resp:  # noqa: S310 - loopback
                        status, payload, kind = resp.status, resp.read(), resp.headers.get("content-type")
                except urllib.error.HTTPError as err:
                    status, payload, kind = err.code, err.read(), err.headers.get("content-type")
                try:
                    reply = _json.loads(payload) if data else None
                except ValueError:
                    reply = None
                if isinstance(reply, dict) and isinstance(reply.get("usage"), dict):
                    with proxy._lock:
                        proxy.usages.append(reply["usage"])
                        proxy.finishes.append(((reply.get("choices") or [{}])[0] or {}).get("finish_reason"))
                self.send_response(status)
                self.send_header("content-type", kind or "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # noqa: N802 - http.server's name
                self._forward(None)

            def do_POST(self):  # noqa: N802
                self._forward(self.rfile.read(int(self.headers.get("content-length") or 0)))

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client that hung up (its timeout): not an error here
                if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> "RecordingProxy":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
