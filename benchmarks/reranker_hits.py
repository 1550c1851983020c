"""Evidence ranking of the fine-tuned cross-encoder (``hqa train reranker``) against the bi-encoder it would replace:
for each question, the ``simple`` program's kept evidence (its hop, reranked by the bi-encoder, cached in
artifacts/cache/ranker/ by ``hqa train ranker``), re-scored by the cross-encoder; Hits@1 / Hits@5 = share of
questions whose first (first five) items hold a gold answer (answer-in-prediction), and its scoring time.

    python benchmarks/reranker_hits.py --set compmix/test:answerable [--model DIR]
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
from hqa.optimize import answer_ranker as ar  # noqa: E402
from hqa.retrievers.rerank import Reranker, evidence_text, trained_dir  # noqa: E402
from hqa.scoring.metrics import answer_recall  # noqa: E402


def hits(items, gold, k):
    return float(any(answer_recall(e.text, gold) for e in items[:k]))


def main() -> int:
    from hqa.programs.simple import SimpleHybrid
    from hqa.toolbox import Toolbox

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="compmix/test:answerable")
    ap.add_argument("--model", default=str(trained_dir()))
    args = ap.parse_args()
    settings = load_settings()
    tb = Toolbox(settings)
    tb = tb.view(reranker=Reranker(None, embedder=tb.embedder_name, memo=tb.vector_memo))
    name = args.set.split(":")[0]
    records = load_dataset(args.set, pack_dir=settings.pack_dir)
    answerable = {str(r.id) for r in load_dataset(f"{name}:answerable", pack_dir=settings.pack_dir)}
    pools = ar.pools(SimpleHybrid(toolbox=tb), records, answerable, set(),
                     ar.pools_cache(settings, tb.reranker))
    ce = Reranker(args.model)
    assert ce.kind == "cross-encoder", f"{args.model} did not load as a cross-encoder"
    bi = {1: 0.0, 5: 0.0}
    cross = {1: 0.0, 5: 0.0}
    start, n_pairs = time.monotonic(), 0
    for p in pools:
        items = list(p.kept)
        scores = ce.scores(p.question, [evidence_text(e) for e in items]) if items else []
        n_pairs += len(items)
        order = [items[i] for i in sorted(range(len(items)), key=lambda i: -float(scores[i]))]
        for k in bi:
            bi[k] += hits(items, p.gold, k)
            cross[k] += hits(order, p.gold, k)
    took = time.monotonic() - start
    n = len(pools)
    print(f"{args.set}: {n} questions, {n_pairs} (question, item) pairs scored in {took:.0f} s")
    print(f"bi-encoder    Hits@1 {bi[1] / n:.3f}  Hits@5 {bi[5] / n:.3f}")
    print(f"cross-encoder Hits@1 {cross[1] / n:.3f}  Hits@5 {cross[5] / n:.3f}  ({args.model})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
