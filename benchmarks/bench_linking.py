"""Entity-linking accuracy of the pack's linker on the answerable sets (only the linker runs; no LM).

A question counts when it has gold question entities; it is linked right when one of the ``--k`` entities
``EntityLinker.spot`` returns (the ``simple`` program keeps 2) is a gold question entity — the definition of the
evaluation report's entity-linking accuracy.  Two linkers are compared:

* ``exact`` — the baseline: question word n-grams that equal a pack label exactly (normalised), longest first;
* ``default`` — the current linker: n-gram mention detection with alias, fuzzy (rapidfuzz) and description-similarity
  scoring (``hqa/retrievers/linking/entities.py``).

    python benchmarks/bench_linking.py [--k 2] [--specs compmix/test:answerable,...] [--no-embed]

Prints a table (accuracy per set and linker, ratio default/exact) and writes benchmarks/results/linking.md.
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
from hqa.retrievers.linking.entities import EntityLinker, embedding_similarity, load_pack_entities  # noqa: E402

SPECS = ("humaniq-compmix:answerable", "compmix/test:answerable", "compmix/dev:answerable",
         "compmix/train:answerable", "qald10:answerable")


def accuracy(linker: EntityLinker, records, k: int, mode: str, show: int = 0) -> tuple[int, int, float]:
    scored = [r for r in records if r.question_entities()]
    right, t0, misses = 0, time.perf_counter(), []
    for r in scored:
        ids = {c.id for c in linker.spot(r.question, k=k, mode=mode)}
        if ids & set(r.question_entities()):
            right += 1
        else:
            misses.append((r.question, r.question_entities(), sorted(ids)))
    for miss in misses[:show]:
        print("   miss:", *miss)
    ms = (time.perf_counter() - t0) * 1000 / max(len(scored), 1)
    return right, len(scored), ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--specs", default=",".join(SPECS))
    ap.add_argument("--no-embed", action="store_true", help="no description similarity (no MiniLM)")
    ap.add_argument("--show-misses", type=int, default=0)
    args = ap.parse_args()
    settings = load_settings()
    sim = None if args.no_embed else embedding_similarity(None)
    linker = EntityLinker(load_pack_entities(settings.pack_dir), sim)
    rows = []
    total = {"exact": [0, 0], "default": [0, 0]}
    for spec in [s.strip() for s in args.specs.split(",") if s.strip()]:
        records = load_dataset(spec, pack_dir=settings.pack_dir)
        line = [spec]
        for mode in ("exact", "default"):
            right, n, ms = accuracy(linker, records, args.k, mode, args.show_misses if mode == "default" else 0)
            total[mode][0] += right
            total[mode][1] += n
            line += [f"{right}/{n} = {right / max(n, 1):.3f}", f"{ms:.1f}"]
        rows.append(line)
    acc = {m: v[0] / max(v[1], 1) for m, v in total.items()}
    rows.append(["all", f"{total['exact'][0]}/{total['exact'][1]} = {acc['exact']:.3f}", "",
                 f"{total['default'][0]}/{total['default'][1]} = {acc['default']:.3f}", ""])
    header = ["set", "exact (baseline)", "ms/q", "default", "ms/q"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    ratio = acc["default"] / acc["exact"] if acc["exact"] else float("inf")
    lines += ["", f"entity linking accuracy@{args.k}: default {acc['default']:.3f} vs exact-match baseline "
              f"{acc['exact']:.3f} (ratio {ratio:.2f}x); description similarity: {'off' if args.no_embed else 'MiniLM'}"]
    text = "\n".join(lines)
    print(text)
    out = REPO / "benchmarks" / "results" / "linking.md"
    out.write_text("# Entity linking on the answerable sets\n\n`python benchmarks/bench_linking.py"
                   + (" --no-embed" if args.no_embed else "") + f" --k {args.k}`\n\n" + text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
