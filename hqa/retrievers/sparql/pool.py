"""The worker-process pool behind the embedded Oxigraph store: each query runs in a child process
(:mod:`hqa.retrievers.sparql.worker`, started by file path) under a memory bound, and is stopped by killing its worker
when it outlives the timeout — the only way to stop pyoxigraph inside a query."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from hqa.errors import EndpointError, PackMissingError

MAX_RESPONSE_BYTES = 50_000_000


class _Worker:
    """One ``sparql_worker.py`` process over the store: a query goes in as a JSON line, its materialised result
    comes back as one.  Killed (and not reused) when a query outlives its deadline or the caller is interrupted."""

    def __init__(self, path: Path, limit: int, memory_mb: int, startup_timeout: float = 60.0):
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("worker.py")), str(path), str(limit), str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        self._buf = b""
        try:
            hello = self._read_line(time.monotonic() + startup_timeout)
        except BaseException:
            self.kill()
            raise
        if hello is None or "ready" not in hello:
            self.kill()
            reason = (hello or {}).get("fatal", "the SPARQL worker did not start")
            raise PackMissingError(f"cannot open Oxigraph store at {path}: {reason}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(Exception):  # a zombie is reaped by the next wait
            self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()

    def _read_line(self, deadline: float) -> dict[str, Any] | None:
        """The next reply line, ``None`` if the worker died; TimeoutError past ``deadline``."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
            if len(self._buf) > MAX_RESPONSE_BYTES:
                raise EndpointError(f"SPARQL worker reply larger than {MAX_RESPONSE_BYTES} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line.decode("utf-8"))

    def query(self, full: str, deadline: float) -> dict[str, Any] | None:
        self.proc.stdin.write(json.dumps({"q": full}).encode("utf-8") + b"\n")
        self.proc.stdin.flush()
        return self._read_line(deadline)


class IsolatedStore:
    """A store-like front for a pool of worker processes: ``query(full)`` returns the materialised result as a dict.
    One worker serves one query at a time; concurrent callers each get their own (spawned on demand, reused
    afterwards).  A query that outlives ``timeout`` gets its worker killed and a ``TimeoutError``; a worker that dies
    mid-query (its memory limit hit) gives ``MemoryError``."""

    def __init__(self, path: Path, timeout: float, limit: int, memory_mb: int):
        self.path, self.timeout, self.limit, self.memory_mb = path, timeout, limit, memory_mb
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._idle: list[_Worker] = [self._spawn()]
        weakref.finalize(self, IsolatedStore._kill_all, self._all)

    def _spawn(self) -> _Worker:
        worker = _Worker(self.path, self.limit, self.memory_mb)
        with self._lock:
            self._all.add(worker)
        return worker

    @staticmethod
    def _kill_all(workers: set[_Worker]) -> None:
        for worker in list(workers):
            worker.kill()
        workers.clear()

    def close(self) -> None:
        with self._lock:
            self._idle.clear()
        self._kill_all(self._all)

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)

    def query(self, full: str, use_default_graph_as_union: bool = True, deadline: float | None = None) -> dict[str, Any]:
        """Run ``full`` in a worker until ``deadline`` (time.monotonic; default: ``timeout`` from now)."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None or not worker.alive():
            if worker is not None:
                self._discard(worker)
            started = time.monotonic()
            worker = self._spawn()
            if deadline is not None:  # starting a worker is not the query's time
                deadline += time.monotonic() - started
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        try:
            reply = worker.query(full, deadline)
        except BaseException:  # timeout, Ctrl-C, a broken pipe: the worker may be mid-query, so it goes
            self._discard(worker)
            raise
        if reply is None or reply.get("memory"):
            self._discard(worker)
            code = worker.proc.returncode
            if reply is None and code != -signal.SIGABRT:  # an allocation failure aborts; anything else is not ours
                raise OSError(f"the SPARQL worker stopped unexpectedly (exit status {code})")
            raise MemoryError
        with self._lock:
            self._idle.append(worker)
        return reply


__all__ = ["IsolatedStore", "MAX_RESPONSE_BYTES"]
