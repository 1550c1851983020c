"""A SPARQL worker process over the embedded Oxigraph store: runs one query at a time, with a memory limit.

Started by :mod:`hqa.retrievers.sparql.pool` for :class:`~hqa.retrievers.sparql.backends.OxigraphSparql` as
``python sparql_worker.py STORE LIMIT MEMORY_MB`` (by file path, so it imports nothing but the standard library and
pyoxigraph).  It caps its own address space with ``RLIMIT_AS`` right after opening the store read-only (the cap is
what the open store holds plus MEMORY_MB), then answers JSON lines on stdin with JSON lines on stdout:
``{"q": query}`` → ``{"boolean": b}`` | ``{"rows": [...], "variables": [...], "truncated": t}`` | ``{"error": msg}``.
Results are materialised here, where the query runs (pyoxigraph's result iterators cannot leave their process).
The parent kills the worker when a query outlives ``kg.timeout``; a query that exhausts the memory limit makes the
worker abort, which the parent reports as such.  SIGINT keeps its default action (terminate), so Ctrl-C in a
terminal stops a worker stuck inside a query at once; the worker also ends within half a second of its parent.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import signal
import sys
import threading
import time
from typing import Any


def _die_with_parent() -> None:
    """End this process within half a second of its parent's death, even in the middle of a query (pyoxigraph
    releases the GIL while it evaluates, so this thread keeps running).  ``prctl(PR_SET_PDEATHSIG)`` is not used:
    it fires when the parent *thread* that spawned the worker exits, and workers outlive those threads."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="hqa-parent-watch", daemon=True).start()


def _address_space() -> int:
    """This process's current virtual memory size in bytes (Linux /proc; 0 where unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:")), 0)
    except OSError:
        return 0


def _value(term: Any) -> str:
    return term.value if hasattr(term, "value") else str(term)


def materialise(result: Any, limit: int) -> dict[str, Any]:
    """A pyoxigraph query result as plain data: at most ``limit`` rows, ``truncated`` when there were more."""
    import pyoxigraph as ox

    if isinstance(result, (ox.QueryBoolean, bool)):
        return {"boolean": bool(result)}
    if isinstance(result, ox.QuerySolutions):
        variables = [v.value for v in result.variables]
        row = lambda s: {v: _value(s[v]) for v in variables if s[v] is not None}  # noqa: E731
    else:  # QueryTriples (CONSTRUCT / DESCRIBE)
        variables = ["subject", "predicate", "object"]
        row = lambda t: {v: _value(getattr(t, v)) for v in variables}  # noqa: E731
    items = iter(result)
    rows = [row(item) for item in itertools.islice(items, limit)]
    return {"rows": rows, "variables": variables, "truncated": next(items, None) is not None}


def main(argv: list[str]) -> int:
    store_path, limit, memory_mb = argv[0], int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _die_with_parent()
    out = sys.stdout
    try:
        import pyoxigraph as ox

        store = ox.Store.read_only(store_path)
        store.query("ASK { ?s ?p ?o }")  # the store's own threads and caches exist before the cap is set
    except (OSError, MemoryError, ImportError, SyntaxError) as exc:
        out.write(json.dumps({"fatal": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return 1
    if memory_mb > 0:  # queries may use memory_mb of address space beyond what the open store already holds
        cap = _address_space() + memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            query = json.loads(line)["q"]
            reply = materialise(store.query(query, use_default_graph_as_union=True), limit)
        except MemoryError:
            reply = {"error": "memory", "memory": True}
        except (SyntaxError, ValueError, OSError, KeyError, TypeError) as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply, ensure_ascii=False) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
