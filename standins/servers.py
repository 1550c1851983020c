"""Local server processes on 127.0.0.1: free ports, readiness, and an `oxigraph serve-read-only` over a store.

Used by the scale-out tests and the load benchmark; every server here binds to the loopback address only.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
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
