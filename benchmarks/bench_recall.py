"""Retrieval recall@k of gold answers on the CompMix questions whose entities the knowledge pack covers.

For each question with at least one gold question entity labelled in the pack, retrieve with each source —
dense passages, BM25 over linearized triples, one-hop SPARQL around the entities spotted in the question — and with
all of them reranked together.  A question counts as a hit at k when a gold answer label (normalised, whole tokens)
occurs in one of the top-k evidence texts, or a gold answer QID is the object of a top-k KG item.

    python benchmarks/bench_recall.py [--split test] [--limit N]
    python benchmarks/bench_recall.py --dataset compmix/test:answerable   # any dataset spec, all its questions

Prints a table and writes benchmarks/results/recall.md (recall-<spec>.md with --dataset).  No LM is involved.  The
last row, "grounded candidates", counts a hit when a gold answer is among the candidate answers the grounded
``simple`` program would offer its LM (drawn from the 6 reranked evidence items it keeps).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hqa.config import load_settings  # noqa: E402
from hqa.data.datasets import load_dataset  # noqa: E402
from hqa.data.jsonl import read_jsonl  # noqa: E402
from hqa.scoring.metrics import normalize_answer  # noqa: E402
from hqa.answering.grounded import evidence_candidates  # noqa: E402
from hqa.retrievers.hop import HopRequest, HopRetriever  # noqa: E402
from hqa.retrievers.base import Evidence  # noqa: E402
from hqa.toolbox import Toolbox  # noqa: E402

KS = (1, 5, 10)


def hit(items, golds: list[str], gold_ids: set[str], k: int) -> bool:
    gold_norm = [f" {normalize_answer(g)} " for g in golds if normalize_answer(g)]
    for ev in items[:k]:
        text = f" {normalize_answer(ev.text)} "
        if any(g in text for g in gold_norm):
            return True
        if str(ev.meta.get("o", "")).strip("<>").rsplit("/", 1)[-1] in gold_ids:
            return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--dataset", help="a dataset spec (e.g. humaniq-compmix:answerable) instead of --split")
    ap.add_argument("--embedder", help="models.embedder for this run (e.g. minilm-int8: passages, queries, linker "
                    "and reranker all embedded with it); results go to recall[-<dataset>]-<embedder>.md")
    ap.add_argument("--passage-embedder", help="models.passage_embedder for this run (\"\" = the query embedder: "
                    "float passages; auto = the default); results go to recall[-<dataset>]-passages-<value>.md")
    args = ap.parse_args()

    settings = load_settings()
    if args.embedder:
        settings.models.embedder = args.embedder
    if args.passage_embedder is not None:
        settings.models.passage_embedder = args.passage_embedder
    tb = Toolbox(settings)
    labelled = {e["id"] for e in read_jsonl(settings.pack_dir / "entities.jsonl") if e.get("label")}
    if args.dataset:
        records = load_dataset(args.dataset, pack_dir=settings.pack_dir)
    else:
        records = [r for r in load_dataset(f"compmix/{args.split}") if labelled.intersection(r.question_entities())]
    if args.limit:
        records = records[: args.limit]
    kmax = max(KS)
    counts = {src: {k: 0 for k in KS} for src in ("text", "triples", "sparql", "all (reranked)")}
    grounded = 0
    start = time.monotonic()
    for r in records:
        golds, gold_ids = list(r.answers), set(r.answer_ids)
        hop = HopRetriever(tb).run(r.question, HopRequest(searches=[r.question], triple_queries=[r.question], spot=2,
                                                          neighbourhood_limit=50), k=kmax, k_per_source=kmax)
        dense, bm25, kg, pool = hop.passages, hop.triples, hop.kg_items, hop.kept  # the path the programs run
        kg_ranked = tb.reranker.rerank(r.question, kg, k=kmax) if kg else []
        for src, items in (("text", dense), ("triples", bm25), ("sparql", kg_ranked), ("all (reranked)", pool)):
            for k in KS:
                counts[src][k] += hit(items, golds, gold_ids, k)
        cands = evidence_candidates(r.question, pool[:6])
        grounded += hit([Evidence(text=c, source="candidate") for c in cands], golds, gold_ids, len(cands))
    elapsed = time.monotonic() - start
    n = max(len(records), 1)
    what = (f"{args.dataset}: {len(records)} questions" if args.dataset else
            f"CompMix {args.split}: {len(records)} questions whose gold question entity is a labelled pack entity")
    lines = [what,
             f"(retrieval only, no LM; {elapsed:.1f} s, {1000 * elapsed / n:.0f} ms per question; "
             f"reranker: {tb.reranker.kind}; embedder: {settings.models.embedder}; passages embedded with: "
             f"{tb.dense.passage_key if hasattr(tb.dense, 'passage_key') else settings.models.embedder})", "",
             "| source | " + " | ".join(f"recall@{k}" for k in KS) + " |", "|---|" + "---|" * len(KS)]
    for src, by_k in counts.items():
        lines.append(f"| {src} | " + " | ".join(f"{by_k[k] / n:.3f}" for k in KS) + " |")
    lines.append(f"| grounded candidates (from the 6 kept items, at most 8) | {grounded / n:.3f} | | |")
    text = "\n".join(lines)
    print(text)
    name = f"recall-{args.dataset.replace('/', '-').replace(':', '-')}.md" if args.dataset else "recall.md"
    if args.embedder:
        name = name.replace(".md", f"-{args.embedder}.md")
    if args.passage_embedder is not None:
        name = name.replace(".md", f"-passages-{args.passage_embedder or 'same'}.md")
    out = REPO / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    which = f"--dataset {args.dataset}" if args.dataset else f"--split {args.split}"
    out.write_text(f"<!-- written by benchmarks/bench_recall.py -->\ncommand: `python benchmarks/bench_recall.py "
                   f"{which}{' --limit ' + str(args.limit) if args.limit else ''}"
                   f"{' --embedder ' + args.embedder if args.embedder else ''}"
                   f"{'' if args.passage_embedder is None else ' --passage-embedder ' + repr(args.passage_embedder)}"
                   f"`\n\n{text}\n",
                   encoding="utf-8")


if __name__ == "__main__":
    main()
