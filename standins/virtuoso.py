"""A throwaway Virtuoso server on 127.0.0.1 for the tests and benchmarks: its own ``virtuoso.ini`` in a folder (free
SQL and HTTP ports, ``DirsAllowed`` set to the dump folder); ``stop()`` shuts it down and kills its process group if
it does not go.  The ini keys follow the Debian package's ``/usr/share/virtuoso-opensource-7/virtuoso.ini``; the
world builder loads into it through :class:`hqa.world.virtuoso.VirtuosoTarget` as into any server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from hqa.errors import HQAError
from hqa.world.virtuoso import VirtuosoTarget, run_isql
from standins.servers import free_port, wait_port

INI = """[Database]
DatabaseFile = {db}/virtuoso.db
ErrorLogFile = {db}/virtuoso.log
LockFile = {db}/virtuoso.lck
TransactionFile = {db}/virtuoso.trx
xa_persistent_file = {db}/virtuoso.pxa
ErrorLogLevel = 7
FileExtend = 200
MaxCheckpointRemap = 2000
Striping = 0
TempStorage = TempDatabase

[TempDatabase]
DatabaseFile = {db}/virtuoso-temp.db
TransactionFile = {db}/virtuoso-temp.trx
MaxCheckpointRemap = 2000
Striping = 0

[Parameters]
ServerPort = 127.0.0.1:{sql_port}
DisableUnixSocket = 1
DisableTcpSocket = 0
MaxClientConnections = 10
CheckpointInterval = 60
CaseMode = 2
DirsAllowed = ., {dirs}
NumberOfBuffers = {buffers}
MaxDirtyBuffers = {dirty}
ThreadsPerQuery = 2

[HTTPServer]
ServerPort = 127.0.0.1:{http_port}
ServerRoot = {db}
MaxClientConnections = 8
ServerThreads = 8
EnabledDavVSP = 0

[SPARQL]
ResultSetMaxRows = 100000
MaxQueryExecutionTime = 60
MaxQueryCostEstimationTime = 400
"""


class VirtuosoServer:
    """A Virtuoso server on 127.0.0.1 in ``folder`` (database, ini, log), reading dumps from ``dump_dir``.

    ``memory_mb`` sizes its buffer pool (Virtuoso's guide: NumberOfBuffers ≈ memory / 8.5 KB pages, two thirds of
    it as MaxDirtyBuffers).  Use as a context manager, or ``start()`` / ``stop()``.
    """

    def __init__(self, folder: Path, dump_dir: Path, memory_mb: int = 256):
        self.folder = Path(folder).resolve()
        self.dump_dir = Path(dump_dir).resolve()
        self.sql_port, self.http_port = free_port(), free_port()
        while self.http_port == self.sql_port:
            self.http_port = free_port()
        self.memory_mb = memory_mb
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/sparql"

    def target(self, graph: str = "urn:hqa:test") -> VirtuosoTarget:
        return VirtuosoTarget(endpoint=self.endpoint, load_dir=self.dump_dir, isql=f"127.0.0.1:{self.sql_port}",
                              graph=graph)

    def start(self, seconds: float = 120.0) -> "VirtuosoServer":
        exe = shutil.which("virtuoso-t")
        if not exe:
            raise HQAError("virtuoso-t not found: install Virtuoso (apt-get install virtuoso-opensource-7-bin)")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        buffers = max(2000, self.memory_mb * 1024 // 9)
        (self.folder / "virtuoso.ini").write_text(INI.format(
            db=self.folder, sql_port=self.sql_port, http_port=self.http_port, dirs=self.dump_dir, buffers=buffers,
            dirty=buffers * 3 // 4), encoding="utf-8")
        self.proc = subprocess.Popen([exe, "-f", "-c", str(self.folder / "virtuoso.ini")], cwd=self.folder,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        try:
            wait_port(self.sql_port, self.proc, seconds=seconds)
            wait_port(self.http_port, self.proc, seconds=seconds)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, seconds: float = 30.0) -> None:
        """Shut the server down (``shutdown`` over isql, then SIGTERM / SIGKILL to its process group)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            run_isql(self.target(), "shutdown;", timeout=seconds)
        except (HQAError, OSError):
            pass
        try:
            proc.wait(timeout=seconds)
            return
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=seconds)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> "VirtuosoServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
