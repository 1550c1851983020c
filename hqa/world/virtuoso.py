"""Virtuoso (Debian package ``virtuoso-opensource-7-bin``: ``virtuoso-t``, ``isql-vt``) as a world's KG engine.

* :class:`VirtuosoTarget` — a running server: its SQL port (for ``isql``), credentials, SPARQL endpoint and a
  directory the server may read (listed in its ``DirsAllowed``) where the builder writes the filtered triples;
* :func:`bulk_load` — Virtuoso's RDF bulk loader over that directory: ``ld_dir(dir, pattern, graph)`` registers the
  files, ``rdf_loader_run()`` loads them, ``checkpoint`` makes them durable; files already loaded are skipped, so an
  interrupted load resumes (http://vos.openlinksw.com/owiki/wiki/VOS/VirtBulkRDFLoader);
* :class:`VirtuosoServer` — a throwaway server on 127.0.0.1 with its own ``virtuoso.ini`` in a folder (free SQL and
  HTTP ports, ``DirsAllowed`` set to the dump folder) for tests and benchmarks; ``stop()`` shuts it down and kills
  its process group if it does not go.  The ini keys follow the Debian package's
  ``/usr/share/virtuoso-opensource-7/virtuoso.ini``.

The programs reach the loaded graph through its SPARQL endpoint (``http://HOST:PORT/sparql``) like any other
endpoint (:class:`hqa.retrievers.sparql.HttpSparql`); without ``FROM`` a Virtuoso query ranges over all graphs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hqa.errors import EndpointError, HQAError


def isql_binary() -> str:
    """Debian names Virtuoso's ``isql`` ``isql-vt`` (unixODBC has another ``isql``)."""
    exe = shutil.which("isql-vt")
    if not exe:
        raise HQAError("isql-vt not found: install Virtuoso (apt-get install virtuoso-opensource-7-bin, or run "
                       "scripts/setup as root)")
    return exe


@dataclass
class VirtuosoTarget:
    """Where a world's triples go in a running Virtuoso."""

    endpoint: str  # SPARQL endpoint, e.g. http://127.0.0.1:8890/sparql
    load_dir: Path  # a directory in the server's DirsAllowed, readable by the server
    isql: str = "127.0.0.1:1111"  # host:port of the SQL listener
    user: str = "dba"
    password: str = "dba"
    graph: str = ""  # named graph the triples go into (default urn:hqa:world:<name>)

    def describe(self) -> dict:
        return {"endpoint": self.endpoint, "isql": self.isql, "graph": self.graph, "load_dir": str(self.load_dir)}


def run_isql(target: VirtuosoTarget, sql: str, timeout: float = 3600.0) -> str:
    """Run SQL statements through isql; EndpointError with Virtuoso's message when one fails."""
    try:
        proc = subprocess.run([isql_binary(), target.isql, target.user, target.password, f"exec={sql}"],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EndpointError(f"Virtuoso at {target.isql} did not finish within {timeout:g}s: {sql[:80]}") from None
    out = proc.stdout + proc.stderr
    for line in out.splitlines():
        if line.startswith("*** Error"):
            raise EndpointError(f"Virtuoso at {target.isql}: {line[4:].strip()[:300]}")
    if proc.returncode != 0:
        raise EndpointError(f"isql to Virtuoso at {target.isql} failed (exit {proc.returncode}): "
                            f"{out.strip()[-300:]}")
    return out


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def bulk_load(target: VirtuosoTarget, pattern: str) -> dict:
    """Load every file matching ``pattern`` in ``target.load_dir`` into ``target.graph``; returns counts.  Files the
    loader could not parse are an EndpointError naming them."""
    d, g = _sql_str(str(Path(target.load_dir).resolve())), _sql_str(target.graph)
    run_isql(target, f"ld_dir({d}, {_sql_str(pattern)}, {g}); rdf_loader_run(); checkpoint;")
    out = run_isql(target, "SELECT ll_file, ll_error FROM DB.DBA.LOAD_LIST WHERE ll_graph = "
                   f"{g} AND ll_error IS NOT NULL;")
    bad = [line.strip() for line in out.splitlines() if str(Path(target.load_dir).resolve()) in line]
    if bad:
        raise EndpointError(f"Virtuoso could not load {bad[0][:300]}")
    count = run_isql(target, f"SPARQL SELECT COUNT(*) FROM <{target.graph}> WHERE {{ ?s ?p ?o }};")
    nums = [line.strip() for line in count.splitlines() if line.strip().isdigit()]
    return {"triples_in_graph": int(nums[-1]) if nums else None}


def clear_graph(target: VirtuosoTarget) -> None:
    """Drop the target graph's triples and its bulk-loader records (a fresh load starts from nothing)."""
    g = _sql_str(target.graph)
    run_isql(target, f"SPARQL CLEAR GRAPH <{target.graph}>; DELETE FROM DB.DBA.LOAD_LIST WHERE ll_graph = {g};")


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
        from hqa.servers import free_port

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
        from hqa.servers import wait_port

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


def wait_endpoint(endpoint: str, seconds: float = 60.0) -> None:
    """Block until the SPARQL endpoint answers ``ASK {}``."""
    import urllib.parse
    import urllib.request

    deadline = time.monotonic() + seconds
    url = endpoint + "?" + urllib.parse.urlencode({"query": "ASK {}"})
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback endpoint
                if resp.status == 200:
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.2)
    raise EndpointError(f"SPARQL endpoint {endpoint} did not answer within {seconds:g}s ({last})")


__all__ = ["VirtuosoTarget", "VirtuosoServer", "bulk_load", "clear_graph", "run_isql", "isql_binary", "wait_endpoint"]
