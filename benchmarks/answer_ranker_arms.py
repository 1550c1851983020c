"""Paired arms of the default's grounded answer: the hand-set ranking and confidence (``programs.ranker = hand``,
``hqa/data/abstain.json``) against the learned ranker (``learned``, ``hqa/data/ranker``) and, with ``--cross``, the
learned ranker's cross-encoder arm (``models.reranker = trained``); no LM involved.

For every question, the ``simple`` program's hop and candidates (:func:`hqa.optimize.answer_ranker.pools`, cached in
artifacts/cache/ranker/ with ``hqa train ranker``'s own), then each arm's best candidate and its selective decision
(:func:`hqa.answering.selective.decide` with the arm's calibration).  With ``choices = 1`` (the default) that best
candidate *is* the program's answer; a question without a candidate abstains (selective) and counts as wrong when
always answering (the program would then ask the LM over the evidence: not measured here).  Scored as ``hqa
evaluate`` scores (answer-in-prediction recall).  Per set and arm: always-answer recall, coverage and precision of
the answered at the arm's threshold, 95% bootstrap intervals, the paired difference to the hand-set arm, and the
risk-coverage curves in one plot per set.

    python benchmarks/answer_ranker_arms.py --sets compmix/test:answerable compmix/dev:answerable \\
        humaniq-compmix:answerable qald10:answerable compmix/test --limit compmix/test=300

Writes benchmarks/results/answer_ranker.md and benchmarks/results/answer_ranker-<set>.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hqa.answering import ranker as learned  # noqa: E402
from hqa.answering import selective  # noqa: E402
from hqa.config import load_settings  # noqa: E402
from hqa.data.datasets import load_dataset  # noqa: E402
from hqa.optimize import answer_ranker as ar  # noqa: E402
from hqa.reports.markdown import risk_coverage_plot  # noqa: E402
from hqa.scoring.metrics import answer_recall  # noqa: E402
from hqa.scoring.stats import bootstrap_interval  # noqa: E402

OUT = REPO / "benchmarks" / "results"


def even(records: list, limit: int | None) -> list:
    if limit is None or limit >= len(records):
        return records
    return [records[int(i * len(records) / limit)] for i in range(limit)]


def decisions(p: ar.Pool, model: learned.RankerModel | None) -> dict:
    """The arm's best candidate of ``p``, its confidence and whether it answers."""
    f = p.featurized
    if model is None:  # the hand-set ranking, its kinds found as the program finds them
        cands = [dataclasses.replace(c, kinds=sorted(k)) for c, k in zip(f.hand[:3], f.kinds)]
        d = selective.decide(p.question, cands)
    else:
        cands = learned.ranked(model, f, 3)
        d = selective.decide(p.question, cands, model=model.calibration)
    best = cands[0].text if cands else ""
    right = bool(best) and bool(answer_recall(best, p.gold))
    return {"right": right, "answered": not d.abstained, "conf": d.confidence, "fit": d.fit, "best": best,
            "reachable": bool(any(p.labels))}


def as_rows(ds: list[dict], gold: list[list[str]]) -> list[dict]:
    """Predictions-row shape for :func:`hqa.reports.selective.selective_summary`."""
    return [{"answer": d["best"] if d["answered"] else "", "gold": g, "scores": {"recall": float(d["right"])},
             "trace": {"selective": {"confidence": d["conf"], "abstained": not d["answered"], "type_fit": d["fit"],
                                     "best": d["best"]}}} for d, g in zip(ds, gold)]


def main() -> int:
    from hqa.programs.simple import SimpleHybrid
    from hqa.reports.selective import selective_summary
    from hqa.retrievers.rerank import Reranker, trained_dir
    from hqa.toolbox import Toolbox

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=["compmix/test:answerable"])
    ap.add_argument("--limit", nargs="*", default=[], help="SPEC=N: an even sample of N of that set")
    ap.add_argument("--cross", action="store_true", help="also the cross-encoder arm (hqa train reranker, then "
                                                          "HQA_MODELS__RERANKER=trained hqa train ranker)")
    ap.add_argument("--out", default=str(OUT / "answer_ranker.md"))
    args = ap.parse_args()
    limits = {k: int(v) for k, v in (s.split("=", 1) for s in args.limit)}
    settings = load_settings()
    tb = Toolbox(settings)
    tb = tb.view(reranker=Reranker(None, embedder=tb.embedder_name, memo=tb.vector_memo))
    arms: dict[str, tuple] = {"hand": (tb, None), "learned": (tb, learned.load_model(learned.shipped_dir()))}
    if args.cross:
        ce = Toolbox(settings).view(reranker=Reranker(str(trained_dir()), embedder=tb.embedder_name,
                                                      memo=tb.vector_memo))
        arms["cross-encoder"] = (ce, learned.load_model(trained_dir()))
    lines = [f"# Paired arms of the grounded answer: {', '.join(arms)}", "",
             f"`python benchmarks/answer_ranker_arms.py {' '.join(sys.argv[1:])}` (pack "
             f"{tb.manifest.get('version')}; no LM: with `choices = 1` the best candidate is the answer).", "",
             "| set | n | arm | any candidate right | always answers: recall [95% CI] | Δ vs hand [95% CI] | "
             "coverage [95% CI] | precision of answered [95% CI] |", "|---|---|---|---|---|---|---|---|"]
    for spec in args.sets:
        name = spec.split(":")[0]
        records = even(load_dataset(spec, pack_dir=settings.pack_dir), limits.get(spec))
        answerable = {str(r.id) for r in load_dataset(f"{name}:answerable", pack_dir=settings.pack_dir)}
        start = time.monotonic()
        results, curves = {}, {}
        for arm, (atb, model) in arms.items():
            program = SimpleHybrid(toolbox=atb)
            pools = ar.pools(program, records, answerable, set(), ar.pools_cache(settings, atb.reranker),
                             cross=arm == "cross-encoder", say=lambda m: print(m, file=sys.stderr))
            ds = [decisions(p, model) for p in pools]
            results[arm] = ds
            curves[arm] = selective_summary(as_rows(ds, [p.gold for p in pools]))
        print(f"{spec}: {len(records)} questions, {time.monotonic() - start:.0f} s", file=sys.stderr)
        hand = np.array([d["right"] for d in results["hand"]], dtype=float)
        for arm, ds in results.items():
            right = np.array([d["right"] for d in ds], dtype=float)
            answered = np.array([d["answered"] for d in ds], dtype=float)
            ok = right * answered
            s = curves[arm]
            rec_ci = bootstrap_interval((right,))
            diff = "–" if arm == "hand" else (f"{(right - hand).mean():+.3f} "
                                              f"[{_ci(bootstrap_interval((right - hand,)))}]")
            cov_ci = bootstrap_interval((answered,))
            prec_ci = bootstrap_interval((ok, answered),
                                         lambda a, b, axis=-1: np.sum(a, axis=axis) / np.maximum(np.sum(b, axis=axis), 1))
            n_ans, n_ok = int(answered.sum()), int(ok.sum())
            reach = np.array([d["reachable"] for d in ds], dtype=float)
            lines.append(f"| `{spec}` | {len(ds)} | {arm} | {reach.mean():.3f} ({int(reach.sum())}) | "
                         f"{right.mean():.3f} ({int(right.sum())}) [{_ci(rec_ci)}] | "
                         f"{diff} | {answered.mean():.3f} ({n_ans}) [{_ci(cov_ci)}] | "
                         f"{(n_ok / n_ans if n_ans else 0):.3f} ({n_ok}/{n_ans}) [{_ci(prec_ci)}] |")
        png = OUT / f"answer_ranker-{spec.replace('/', '_').replace(':', '_')}.png"
        risk_coverage_plot({a: c for a, c in curves.items() if c}, png, f"{spec} (n={len(records)})")
    lines += ["", "*Any candidate right*: the share of questions with a gold answer among all the arm's candidates, "
              "the recall a perfect ranking of them would reach.", "",
              "Risk-coverage curves: `benchmarks/results/answer_ranker-<set>.png` (a dot at each arm's threshold).", ""]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


def _ci(ci) -> str:
    lo, hi = ci
    return "–" if lo is None else f"{lo:.3f}, {hi:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
