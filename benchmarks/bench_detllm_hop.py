"""Time the retrieval half of one DETLLM hop (no LM) over the real knowledge pack with the real retrievers.

One hop's retrieval = entity linking of the query entity + dense passages (k_per_source) + BM25 over linearized
triples (k_per_source) + one SPARQL query on the embedded Oxigraph store (with label lookup) + dedupe + rerank of the
union to the top k.  The per-hop plans are built from real benchmark questions (Mintaka/QALD question files) without
an LM: search query = the question, query entity = the first entity the linker spots, SPARQL = a one-hop query around
that entity (the shape an LM writes).  One-off costs (model loads, index builds) are paid by a warm-up call and
reported separately.  Target: 50 ms median per hop.

    python benchmarks/bench_detllm_hop.py [--n 30] [--k 5] [--k-per-source 5] [--artifacts artifacts]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

TARGET_MS = 50.0
QUESTION_FILES = ["humaniq/data/mintaka.txt", "humaniq/data/qald.txt"]  # in the data directory (hqa data pull)
FALLBACK = [
    "Who is the head of state of the country whose capital is Libreville?",
    "Which continent is Gabon in?",
    "Who directed Alien?",
    "What is the capital of France?",
]


def _questions(n: int) -> list[str]:
    from hqa.data.store import require

    lists = [[line.strip() for line in require(f).read_text(encoding="utf-8").splitlines() if line.strip()]
             for f in QUESTION_FILES]
    qs = [x for group in zip(*lists) for x in group] if lists else []  # interleave the files
    qs = qs or FALLBACK
    return [qs[i % len(qs)] for i in range(n)]


class Timed:
    """Wraps a retriever callable (or a method) and accumulates its wall time per call."""

    def __init__(self, fn):
        self.fn, self.ms = fn, 0.0

    def __call__(self, *a, **kw):
        t = time.perf_counter()
        try:
            return self.fn(*a, **kw)
        finally:
            self.ms += (time.perf_counter() - t) * 1000


class TimedObj:
    """Proxy timing the named methods of an object (linker.link, sparql.run/labels, reranker.rerank)."""

    def __init__(self, obj, *methods):
        self._obj = obj
        self._timers = {m: Timed(getattr(obj, m)) for m in methods}

    def __getattr__(self, name):
        return self._timers.get(name) or getattr(self._obj, name)

    @property
    def ms(self) -> float:
        return sum(t.ms for t in self._timers.values())

    def reset(self):
        for t in self._timers.values():
            t.ms = 0.0


def _stats(label: str, ms: list[float]) -> float:
    med = statistics.median(ms)
    p90 = sorted(ms)[int(0.9 * (len(ms) - 1))]
    print(f"{label:<28} median {med:8.2f} ms   p90 {p90:8.2f} ms   max {max(ms):8.2f} ms   "
          f"median/target {med / TARGET_MS:.3f}")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--k-per-source", type=int, default=5)
    ap.add_argument("--artifacts", default=None, help="artifacts dir holding pack/ (default: the configured one)")
    args = ap.parse_args()

    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from hqa.config import load_settings
    from hqa.programs.detllm import HopPlan, hop_request
    from hqa.retrievers.hop import HopRetriever
    from hqa.toolbox import Toolbox

    settings = load_settings(environ={}, paths_artifacts=args.artifacts) if args.artifacts else load_settings()
    real = Toolbox(settings)
    t0 = time.perf_counter()
    dense, bm25 = Timed(real.dense), Timed(real.bm25)
    linker = TimedObj(real.linker, "link")
    sparql = TimedObj(real.sparql, "run", "labels")
    reranker = TimedObj(real.reranker, "rerank")
    tb = Toolbox(settings, dense=dense, bm25=bm25, linker=linker, sparql=sparql, reranker=reranker)

    # plans without an LM: question as search query, the first spotted entity, a one-hop SPARQL around it
    questions = _questions(args.n)
    plans = []
    for q in questions:
        spotted = real.linker.spot(q, k=1)
        ent = spotted[0] if spotted else None
        sq = (f"SELECT ?p ?o WHERE {{ wd:{ent.id} ?p ?o . "
              f'FILTER(STRSTARTS(STR(?p), "http://www.wikidata.org/prop/direct/")) }} LIMIT 20') if ent else None
        plans.append(HopPlan(search_query=q, query_entity=ent.label if ent else "", sparql=sq))
    warm = "warm-up question about Gabon?"
    HopRetriever(tb).run(warm, hop_request(warm, [HopPlan(search_query="capital of Gabon", query_entity="Gabon",
                                                          sparql="SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }")]),
                         k=args.k, k_per_source=args.k_per_source)
    setup_s = time.perf_counter() - t0
    print(f"pack: {settings.pack_dir}; reranker: {real.reranker.kind}; setup + warm-up (model loads, indexes, "
          f"spotting {len(questions)} questions): {setup_s:.2f} s")

    def one_pass():
        parts: dict[str, list[float]] = {"link": [], "dense": [], "bm25": [], "sparql(+labels)": [], "rerank": []}
        total, rows = [], []
        for q, plan in zip(questions, plans):
            dense.ms = bm25.ms = 0.0
            for o in (linker, sparql, reranker):
                o.reset()
            t = time.perf_counter()
            r = HopRetriever(tb).run(q, hop_request(q, [plan]), k=args.k, k_per_source=args.k_per_source)
            total.append((time.perf_counter() - t) * 1000)
            parts["link"].append(linker.ms)
            parts["dense"].append(dense.ms)
            parts["bm25"].append(bm25.ms)
            parts["sparql(+labels)"].append(sparql.ms)
            parts["rerank"].append(reranker.ms)
            rows.append(r.n_by_source)
            assert len(r.kept) <= args.k
        return total, parts, rows

    n_sparql = sum(1 for p in plans if p.sparql)
    meds = []
    for label in ("first pass (cold: each item's embedding computed by the reranker)",
                  "second pass, same hops (reranker's item-embedding cache warm, SPARQL label cache warm)"):
        total, parts, rows = one_pass()
        print(f"-- {label}")
        print(f"{len(questions)} hops, k={args.k}, k_per_source={args.k_per_source}, {n_sparql} with a SPARQL query; "
              f"mean pool: text {statistics.mean(r['text'] for r in rows):.1f}, triples "
              f"{statistics.mean(r['triples'] for r in rows):.1f}, sparql rows "
              f"{statistics.mean(r['sparql'] for r in rows):.1f}; target {TARGET_MS:.0f} ms")
        meds.append(_stats("one hop's retrieval (total)", total))
        for name, ms in parts.items():
            _stats(f"  {name}", ms)
    print(f"verdict: cold median {meds[0]:.2f} ms {'<=' if meds[0] <= TARGET_MS else '>'} {TARGET_MS:.0f} ms target; "
          f"warm median {meds[1]:.2f} ms {'<=' if meds[1] <= TARGET_MS else '>'} {TARGET_MS:.0f} ms")


if __name__ == "__main__":
    main()
