"""Per-query cost of running embedded-store SPARQL in a bounded worker process vs in this process.

``OxigraphSparql(isolate=True)`` (the default) sends each query to a worker process with a memory limit that is
killed on timeout; ``isolate=False`` runs pyoxigraph in-process, as before the bound existed (and with no way to
stop a query before its first row).  Both go through ``OxigraphSparql.run`` (query check, LIMIT, materialised rows),
so the ratio is the cost of the isolation alone.  Also measured: the cost of a timeout (kill + respawn a worker).

    python benchmarks/bench_sparql_isolation.py [--store artifacts/pack/kg] [--repeat 300]

Prints a table and writes ``benchmarks/results/sparql_isolation.md``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hqa.retrievers.sparql.backends import OxigraphSparql  # noqa: E402

QUERIES = {
    "one-hop": "SELECT ?p ?o WHERE { wd:Q1000 ?p ?o } LIMIT 50",
    "ask": "ASK { wd:Q1000 wdt:P36 ?x }",
    "labels (GetLabel)": 'SELECT ?e ?l WHERE { VALUES ?e { wd:Q1000 wd:Q3825 } ?e rdfs:label ?l . FILTER(LANG(?l) = "en") }',
    "count all": "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
}


def per_query_ms(backend: OxigraphSparql, query: str, repeat: int) -> float:
    for _ in range(5):
        backend.run(query)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        res = backend.run(query)
        times.append(time.perf_counter() - start)
        assert res.ok, res.error
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=str(ROOT / "artifacts" / "pack" / "kg"))
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()

    inproc = OxigraphSparql(args.store, timeout=10, limit=100, isolate=False)
    isolated = OxigraphSparql(args.store, timeout=10, limit=100, isolate=True)
    lines = [f"# SPARQL isolation cost ({platform.machine()}, {platform.python_version()}, store {args.store})", "",
             "Median over runs of `OxigraphSparql.run`; baseline = in-process pyoxigraph (isolate=False).", "",
             "| query | in-process ms | worker ms | ratio (worker / in-process) | added ms |", "|---|---|---|---|---|"]
    for name, query in QUERIES.items():
        a = per_query_ms(inproc, query, args.repeat)
        b = per_query_ms(isolated, query, args.repeat)
        lines.append(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f}x | {b - a:.3f} |")
        print(lines[-1], flush=True)

    short = OxigraphSparql(args.store, timeout=0.5, limit=100, isolate=True)
    runaway = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"
    start = time.perf_counter()
    res = short.run(runaway)
    stopped = time.perf_counter() - start
    start = time.perf_counter()
    after = short.run(QUERIES["one-hop"])  # spawns a fresh worker
    respawn = time.perf_counter() - start
    assert res.error and "timed out" in res.error and after.ok
    lines += ["", f"Runaway query with timeout 0.5 s: returned after {stopped:.3f} s ({res.error}); the next query "
              f"(respawning the worker) took {respawn * 1000:.1f} ms."]
    print(lines[-1])
    for b in (isolated, short):
        b.close()
    out = ROOT / "benchmarks" / "results" / "sparql_isolation.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written {out}")


if __name__ == "__main__":
    main()
