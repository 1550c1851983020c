"""Virtuoso (Debian package ``virtuoso-opensource-7-bin``: ``virtuoso-t``, ``isql-vt``) as a world's KG engine.

* :class:`VirtuosoTarget` — a running server: its SQL port (for ``isql``), credentials, SPARQL endpoint and a
  directory the server may read (listed in its ``DirsAllowed``) where the builder writes the filtered triples;
* :func:`bulk_load` — Virtuoso's RDF bulk loader over that directory: ``ld_dir(dir, pattern, graph)`` registers the
  files, ``rdf_loader_run()`` loads them, ``checkpoint`` makes them durable; files already loaded are skipped, so an
  interrupted load resumes (http://vos.openlinksw.com/owiki/wiki/VOS/VirtBulkRDFLoader);

A throwaway server for the tests and benchmarks is :class:`standins.virtuoso.VirtuosoServer` (outside the package).

The programs reach the loaded graph through its SPARQL endpoint (``http://HOST:PORT/sparql``) like any other
endpoint (:class:`hqa.retrievers.sparql.backends.HttpSparql`); without ``FROM`` a Virtuoso query ranges over all graphs.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hqa.errors import EndpointError, HQAError


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
    exe = shutil.which("isql-vt")  # Debian's name for Virtuoso's isql (unixODBC has another isql)
    if not exe:
        raise HQAError("isql-vt not found: install Virtuoso (apt-get install virtuoso-opensource-7-bin, or run "
                       "scripts/setup as root)")
    try:
        proc = subprocess.run([exe, target.isql, target.user, target.password, f"exec={sql}"],
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


__all__ = ["VirtuosoTarget", "bulk_load", "clear_graph", "run_isql"]
