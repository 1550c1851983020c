"""The retrieval hop the programs run, over a world at scale: ``HopRetriever`` exactly as ``simple`` calls it
(spot 2 entities, their one-hop SPARQL neighbourhoods, dense passages and BM25 for the question, dedupe, rerank),
timed per question without the LM.  Target: p50 ≤ 50 ms on 1M passages + 10M triples.

The world is ``--world DIR`` or the one ``bench_world_kg.py --triples N`` built (``artifacts/bench/world-N``); with
``--passages FILE[:FORMAT]`` a world of the same dump plus those passages is built first (the passage side,
``hqa.world.text``); with ``--text-world DIR`` the text part built there (``bench_world_text.py``'s 1M passages) is
linked next to the KG world's parts.  A world without passages is timed on its KG part alone (the text sources then answer
"no passages"), and the output says so.

    nice -n 10 python benchmarks/bench_world_hop.py [--triples 10000000] [--world DIR] [--passages FILE |
                                                    --text-world artifacts/bench/world-text] [--n 200]
                                                    [--embedder minilm-int8] [--passes 2] [--out NAME.md]

Prints p50 / p95 per stage, the process CPU time per hop (steadier than wall time on a shared machine) and the ratio of
the p50 to the 50 ms target; writes benchmarks/results/world_hop.md (``--out`` names another file).  ``--embedder``
sets the query-side embedder (linker similarity, reranker; with ``--text-world`` also the passages' query embedder —
that world's vectors then only stand in for latency).  ``--passes 2`` asks the same questions again: the first pass
meets every entity and triple for the first time (cold: everything embedded), the second finds them in the toolbox's
vector memo and the linker's spot cache (warm: a later hop over the same question and entities).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_world_kg import niced, pct, questions_from  # noqa: E402

TARGET_MS = 50.0


def with_text(world: Path, passages: str) -> Path:
    """A world with the same Wikidata dump as ``world`` plus a text part built from ``passages`` (one build)."""
    from hqa.world.build import BuildOptions, build_world
    from hqa.retrievers.world_manifest import open_world
    from hqa.world.dumps import parse_source

    out = world.parent / f"{world.name}+text"
    if not (out / "world.json").exists():
        dumps = [(Path(s["path"]), s["format"].removeprefix("wikidata-")) for s in open_world(world).manifest["sources"]
                 if s.get("part") == "kg"]
        build_world(out, out.name, BuildOptions(wikidata=dumps,
                                                passages=[parse_source(passages, ("dpr-tsv", "kilt", "jsonl"))]),
                    progress=True)
    return out


def compose(world: Path, text_dir: Path, embedder: str | None = None) -> Path:
    """A world made of ``world``'s KG and label store and the text part built in ``text_dir`` (a world, or a folder
    ``hqa.world.text.build_text`` built into, e.g. by ``bench_world_text.py``), linked, not copied."""
    from hqa.retrievers.world_manifest import open_world, write_manifest

    kg = open_world(world).manifest
    try:
        other = open_world(text_dir).manifest
        text, sources = other["text"], [s for s in other["sources"] if s.get("part") == "text"]
    except Exception:  # noqa: BLE001 - not a world: the text builder's own record of what it built
        text = json.loads((text_dir / ".build" / "text" / "section.json").read_text())
        sources = []
    if embedder:  # the query side of the dense search (the stored vectors are whatever the text world holds)
        text = {**text, "embedder": embedder}
    out = world.parent / f"{world.name}+{text_dir.name}{'+' + embedder if embedder else ''}"
    out.mkdir(exist_ok=True)
    for name, target in (("kg", world / "kg"), ("labels.sqlite", world / "labels.sqlite"), ("text", text_dir / "text")):
        link = out / name
        if not link.is_symlink():
            link.symlink_to(target.resolve())
    write_manifest(out, {**kg, "name": out.name, "text": text, "sources": kg["sources"] + sources,
                         "embedder": text.get("embedder")})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triples", type=int, default=10_000_000)
    ap.add_argument("--world", type=Path, help="a world folder (default artifacts/bench/world-<triples>)")
    ap.add_argument("--passages", help="build a text part from this passage file first (FILE[:FORMAT])")
    ap.add_argument("--text-world", type=Path, help="take the text part built in this folder (e.g. "
                    "artifacts/bench/world-text from bench_world_text.py) together with the KG world")
    ap.add_argument("--n", type=int, default=200, help="questions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-embed", action="store_true", help="without MiniLM: no description similarity in linking, "
                    "rerank keeps retrieval order (isolates the stores' share of the hop)")
    ap.add_argument("--embedder", help="query-side embedder (default: the settings' minilm), e.g. minilm-int8")
    ap.add_argument("--passes", type=int, default=1, help="ask the questions this many times (2: cold, then warm)")
    ap.add_argument("--out", help="results file name under benchmarks/results (default world_hop.md, "
                    "world_hop_no_embed.md with --no-embed)")
    args = ap.parse_args()
    world = args.world or REPO / "artifacts" / "bench" / f"world-{args.triples}"
    if not (world / "world.json").exists():
        raise SystemExit(f"no world at {world}: run benchmarks/bench_world_kg.py --triples {args.triples} first")
    if args.passages:
        world = with_text(world, args.passages)
    elif args.text_world:
        world = compose(world, args.text_world, args.embedder)
    from hqa.config import load_settings
    from hqa.retrievers.hop import HopRequest, HopRetriever
    from hqa.toolbox import Toolbox
    from hqa.retrievers.world_manifest import open_world

    manifest = open_world(world).manifest
    settings = load_settings(Path("/nonexistent-hqa.toml"), world_path=str(world))
    if args.embedder:
        settings.models.embedder = args.embedder
    parts = {}
    if args.no_embed:
        from hqa.retrievers.linking.label_store import LabelStoreLinker

        class KeepOrder:
            kind = "none"

            def rerank(self, query, items, k=None):
                return list(items)[:k]

        parts = {"reranker": KeepOrder(), "linker": LabelStoreLinker(world / "labels.sqlite")}
    tb = Toolbox(settings, **parts)
    for part in ("sparql", "linker", "dense", "bm25", "reranker"):
        getattr(tb, part)
    hop = HopRetriever(tb)
    questions = [q for q, _ in questions_from(world / "labels.sqlite", args.n + 10, args.seed)]
    req = lambda q: HopRequest(searches=[q], triple_queries=[q], spot=2, neighbourhood_limit=30)  # noqa: E731
    for q in questions[:10]:  # warm-up: models, store pages, SPARQL worker
        hop.run(q, req(q), k=6, k_per_source=6)
    text = manifest.get("text") or {}
    kg = manifest.get("kg") or {}
    load = os.getloadavg()[0]
    lines = [f"# Retrieval hop over a world ({world.name})", "",
             f"Command: `{niced()}python benchmarks/bench_world_hop.py --triples {args.triples}"
             f"{' --passages ' + args.passages if args.passages else ''}"
             f"{' --text-world ' + str(args.text_world) if args.text_world else ''}"
             f"{' --no-embed' if args.no_embed else ''}{' --embedder ' + args.embedder if args.embedder else ''}"
             f"{' --passes ' + str(args.passes) if args.passes != 1 else ''} --n {args.n}`", "",
             f"World: {kg.get('triples', 0):,} triples ({kg.get('engine')}), "
             f"{(manifest.get('labels') or {}).get('entities', 0):,} entities in the label store, "
             + (f"{text.get('passages', 0):,} passages ({text.get('engine')}, "
                f"{(text.get('dense') or {}).get('kind', '?')})" if text else
                "**no passages** (the text part is not built: the hop's dense/BM25-over-passages stages are empty)")
             + f"; query-side embedder: {'none (--no-embed)' if args.no_embed else args.embedder or 'minilm'}", ""]
    for n_pass in range(1, args.passes + 1):
        stages: dict[str, list[float]] = {}
        pools = []
        cpu0 = time.process_time()
        for q in questions[10:]:
            res = hop.run(q, req(q), k=6, k_per_source=6)
            for name, ms in res.timings.items():
                stages.setdefault(name, []).append(ms)
            pools.append(res.n_pool)
        cpu_ms = (time.process_time() - cpu0) * 1000 / len(pools)
        total = stages["total_ms"]
        if args.passes > 1:
            what = "cold: first time these questions are asked" if n_pass == 1 else "warm: the same questions again"
            lines += [f"## Pass {n_pass} ({what})", ""]
        lines += ["| stage | p50 ms | p95 ms |", "|---|---|---|"]
        for name in ("link_ms", "dense_ms", "text_bm25_ms", "bm25_ms", "sparql_ms", "rerank_ms", "total_ms"):
            xs = stages.get(name, [0.0])
            lines.append(f"| {name[:-3]} | {pct(xs, 50):.1f} | {pct(xs, 95):.1f} |")
        lines += ["", f"p50 {pct(total, 50):.1f} ms vs the {TARGET_MS:.0f} ms target: ratio "
                  f"**{pct(total, 50) / TARGET_MS:.2f}**; {len(total)} questions, mean pool "
                  f"{statistics.mean(pools):.1f} items reranked; process CPU {cpu_ms:.0f} ms per hop (this "
                  "process, all its threads; the SPARQL worker process not counted)", ""]
    lines += [f"Load average (1 min) at the start: {load:.1f}, at the end: {os.getloadavg()[0]:.1f} "
              f"(shared {os.cpu_count()}-core machine).", ""]
    print("\n".join(lines))
    name = args.out or ("world_hop_no_embed.md" if args.no_embed else "world_hop.md")
    out = REPO / "benchmarks" / "results" / name
    out.write_text("\n".join(lines) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
