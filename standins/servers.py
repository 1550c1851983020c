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
