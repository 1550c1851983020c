"""Fit and check the answer-candidate ranking weights (hqa.answering.candidates.WEIGHTS); no LM involved.

For every question of the answerable sets, one retrieval hop as the ``simple`` program runs it (30 reranked evidence
items kept), then candidates ranked by :func:`hqa.answering.candidates.rank_candidates`.  A question counts at k
when a gold answer is among the k best candidates (answer-in-prediction recall, as ``hqa evaluate`` scores).  The
last column is the share of questions whose gold answer the pack can name (``AnswerableIndex.reason(named=True)``):
the others are reachable only through a gold answer QID the pack has no label for.

    python benchmarks/tune_candidates.py            # report the shipped weights on every answerable set
    python benchmarks/tune_candidates.py --fit      # coordinate ascent on compmix/train:answerable only, then report

Fitting only ever looks at ``--train`` (default compmix/train:answerable); the other sets are reported, never used.
Hops are cached in artifacts/cache/candidate-hops.pkl (keyed by pack version).  Writes
benchmarks/results/candidates.md.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hqa.config import load_settings  # noqa: E402
from hqa.data.answerable import AnswerableIndex  # noqa: E402
from hqa.data.datasets import load_dataset  # noqa: E402
from hqa.scoring.metrics import answer_recall  # noqa: E402
from hqa.answering.candidates import WEIGHTS, candidate_features, score_candidates  # noqa: E402
from hqa.retrievers.embedding.encoders import embed  # noqa: E402
from hqa.retrievers.hop import HopRequest, HopRetriever  # noqa: E402
from hqa.toolbox import Toolbox  # noqa: E402

SETS = ("compmix/train:answerable", "compmix/dev:answerable", "compmix/test:answerable", "humaniq-compmix:answerable",
        "qald10:answerable", "qald9plus:answerable")
GRID = (-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def hops(settings, specs) -> list[dict]:
    cache = settings.artifacts_dir / "cache" / "candidate-hops.pkl"
    version = (settings.pack_dir / "manifest.json").read_text()
    if cache.exists():
        stored = pickle.loads(cache.read_bytes())
        if stored.get("version") == version and set(specs) <= set(stored["specs"]):
            return [r for r in stored["rows"] if r["spec"] in specs]
    tb = Toolbox(settings)
    rows = []
    for spec in specs:
        for r in load_dataset(spec, pack_dir=settings.pack_dir):
            hop = HopRetriever(tb).run(r.question, HopRequest(searches=[r.question], triple_queries=[r.question],
                                                              spot=2, neighbourhood_limit=30), k=30, k_per_source=10)
            rows.append({"spec": spec, "id": r.id, "question": r.question, "answers": list(r.answers),
                         "entities": [c.to_dict() for c in hop.entities], "kept": hop.kept})
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps({"version": version, "specs": list(specs), "rows": rows}))
    return rows


class CachedEmbed:
    """``embed`` memoised per text, kept on disk between runs (artifacts/cache/candidate-embeddings.pkl)."""

    def __init__(self, path: Path):
        self.path = path
        self.vectors: dict[str, np.ndarray] = pickle.loads(path.read_bytes()) if path.exists() else {}
        self.added = 0

    def __call__(self, texts):
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, embed(missing)))
            self.added += len(missing)
        return np.stack([self.vectors[t] for t in texts])

    def save(self) -> None:
        if self.added:
            self.path.write_bytes(pickle.dumps(self.vectors))


def featurize(rows, emb) -> None:
    """Each row's candidates with their terms (``r["features"]``), computed once and scored under many weights."""
    for r in rows:
        r["features"] = candidate_features(r["question"], r["kept"], entities=r["entities"], embed=emb)


def positions(rows, weights) -> list[int | None]:
    out = []
    for r in rows:
        cands = score_candidates(r["features"], weights, max_candidates=10**6)
        out.append(next((i for i, c in enumerate(cands) if answer_recall(c.text, r["answers"])), None))
    return out


def at(pos: list[int | None], k: int) -> float:
    return sum(p is not None and p < k for p in pos) / max(len(pos), 1)


def fit(rows, start: dict[str, float]) -> dict[str, float]:
    def objective(w):
        pos = positions(rows, w)
        return at(pos, 1) + 0.2 * at(pos, 3)

    weights, best = dict(start), objective(start)
    for sweep in range(3):
        improved = False
        for name in list(weights):
            for value in GRID:
                trial = {**weights, name: value}
                score = objective(trial)
                if score > best + 1e-9:
                    weights, best, improved = trial, score, True
        print(f"sweep {sweep + 1}: objective {best:.3f} {weights}", flush=True)
        if not improved:
            break
    return weights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="fit the weights on --train first")
    ap.add_argument("--train", default=SETS[0])
    args = ap.parse_args()
    settings = load_settings()
    start = time.monotonic()
    rows = hops(settings, SETS)
    emb = CachedEmbed(settings.artifacts_dir / "cache" / "candidate-embeddings.pkl")
    featurize(rows, emb)
    weights = dict(WEIGHTS)
    if args.fit:
        weights = fit([r for r in rows if r["spec"] == args.train], weights)
    index = AnswerableIndex.from_pack(settings.pack_dir)
    lines = ["| set | n | best candidate right (top-1) | top-3 | top-5 | among all candidates "
             "| answer named in the pack |", "|---|---|---|---|---|---|---|"]
    for spec in SETS:
        pos = positions([r for r in rows if r["spec"] == spec], weights)
        records = load_dataset(spec, pack_dir=settings.pack_dir)
        named = sum(index.reason(r, named=True) is not None for r in records) / max(len(records), 1)
        lines.append(f"| `{spec}` | {len(pos)} | {at(pos, 1):.3f} | {at(pos, 3):.3f} | {at(pos, 5):.3f} | "
                     f"{at(pos, 10**6):.3f} | {named:.3f} |")
    emb.save()
    table = "\n".join(lines)
    print(table)
    print(f"weights: {weights}\n({time.monotonic() - start:.0f} s)")
    out = REPO / "benchmarks" / "results" / "candidates.md"
    out.write_text("# Answer-candidate ranking (no LM)\n\n`python benchmarks/tune_candidates.py"
                   f"{' --fit' if args.fit else ''}`\n\n{table}\n\nweights: `{weights}`\n", encoding="utf-8")


if __name__ == "__main__":
    main()
