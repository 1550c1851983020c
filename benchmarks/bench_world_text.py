"""Build the text side of a world from a generated DPR ``psgs_w100.tsv`` and measure it.

Prints passages/s per stage, the build's peak RSS against the 4 GB target (``ratio`` = peak / 4 GiB, must stay < 1),
the index sizes on disk, and then the query latency of dense search and BM25 on the built world (p50 / p95).

The embedder: ``--embedder minilm`` runs the real all-MiniLM-L6-v2 through
:func:`hqa.retrievers.embedding.encoders.embed` (what ``hqa world build`` does).  On this 2-core machine MiniLM embeds
tens of passages per second, so a 1M build with it takes many hours; ``--embedder hash`` swaps in a fast deterministic
stand-in (hashed bag of words projected to 384 dimensions, L2-normalised) to measure everything else of the pipeline at
full size — the store, BM25, the vectors file, the faiss HNSW build, checkpoints and memory — and ``--minilm-sample N``
measures MiniLM's passages/s on N passages of the same corpus (in its own process, with its own peak RSS), so the
full-build time with MiniLM is ``passages / that rate`` plus the other stages.

Usage::

    nice -n 10 python benchmarks/bench_world_text.py --documents 1000000 --embedder hash --minilm-sample 2000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
TARGET_RSS = 4 * 1024 ** 3


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() \
        else Path(path).stat().st_size


def child_build(args) -> dict:
    import gen_passages as G
    import hqa.world.text as T

    if args.embedder == "hash":
        T.embed = G.hash_embed_factory()
    t0 = time.perf_counter()
    embedder = "minilm" if args.embedder == "hash" else args.embedder  # the stand-in replaces what embed() returns
    section = T.build_text(args.world, [(args.corpus, "dpr-tsv")], embedder=embedder, engine=args.engine,
                           batch_size=args.batch_size, progress=True)
    wall = time.perf_counter() - t0
    text = args.world / "text"
    sizes = {name: du(text / name) for name in ("passages.sqlite", "vectors.npy", "dense.faiss", "milvus.db",
                                                 "bm25") if (text / name).exists()}
    return {"section": {k: v for k, v in section.items() if k != "sources"}, "wall_s": round(wall, 1),
            "sizes": sizes, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def child_minilm(args) -> dict:
    """MiniLM (``--sample-embedder``) passages/s on the first N passages of the corpus, batch ``--batch-size``, as the
    build calls it."""
    from hqa.retrievers.dense import passage_text
    from hqa.retrievers.embedding.encoders import embed
    from hqa.world.passages import iter_passages

    texts = []
    for p in iter_passages(args.corpus, "dpr-tsv"):
        texts.append(passage_text(p))
        if len(texts) >= args.minilm_sample:
            break
    name = args.sample_embedder
    embed(texts[:8], name, batch_size=8)  # load the model outside the timing
    t0, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), args.batch_size):
        embed(texts[i:i + args.batch_size], name, batch_size=args.batch_size)
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu
    return {"embedder": name, "passages": len(texts), "seconds": round(dt, 1),
            "passages_per_s": round(len(texts) / dt, 1), "passages_per_cpu_s": round(len(texts) / cpu, 1),
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def child_query(args) -> dict:
    """Latency of dense search (query vector given: index + passage fetch) and of BM25 on the built world, plus
    MiniLM query embedding."""
    import gen_passages as G
    from hqa.retrievers.passage_store import open_text

    section = json.loads((args.world / ".build" / "text" / "section.json").read_text())
    if args.embedder == "hash":  # the query side too
        import hqa.retrievers.dense as D

        D.embed = G.hash_embed_factory()
    tw = open_text(args.world, section)
    rng = np.random.default_rng(1)
    docs = [G.document(int(i), args.documents) for i in rng.integers(0, args.documents, size=args.queries)]
    queries = [f"When was {d.title} founded and by whom?" for d in docs]
    qv = tw.dense.embed_queries(queries)
    tw.dense.search_vectors(qv[:2], 10)
    tw.bm25(queries[0], 10)
    dense_ms, bm25_ms, dense_hit, bm25_hit = [], [], 0, 0
    for d, q, v in zip(docs, queries, qv):
        t0 = time.perf_counter()
        hits = tw.dense.search_vectors(v[None, :], 10)[0]
        dense_ms.append((time.perf_counter() - t0) * 1000)
        dense_hit += any(h.meta["title"] == d.title for h in hits)
        t0 = time.perf_counter()
        hits = tw.bm25(q, 10)
        bm25_ms.append((time.perf_counter() - t0) * 1000)
        bm25_hit += any(h.meta["title"] == d.title for h in hits)
    out = {"queries": len(queries), "dense_search_ms": pct(dense_ms), "bm25_ms": pct(bm25_ms),
           "dense_hit@10": round(dense_hit / len(queries), 3), "bm25_hit@10": round(bm25_hit / len(queries), 3),
           "rss_after_open": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if args.minilm_sample:
        from hqa.retrievers.embedding.encoders import embed

        embed(queries[:2])
        times = []
        for q in queries[:50]:
            t0 = time.perf_counter()
            embed([q])
            times.append((time.perf_counter() - t0) * 1000)
        out["minilm_query_embed_ms"] = pct(times)
    return out


def child_recall(args) -> dict:
    """Recall@10 of the built world's HNSW index against exact search over its own vectors.npy, per efSearch."""
    import faiss

    import gen_passages as G
    from hqa.retrievers.vectors import read_blocks

    text = args.world / "text"
    index = faiss.read_index(str(text / "dense.faiss"))
    rng = np.random.default_rng(2)
    docs = [G.document(int(i), args.documents) for i in rng.integers(0, args.documents, size=args.queries)]
    if args.embedder == "hash":
        embed = G.hash_embed_factory()
    else:
        from hqa.retrievers.embedding.encoders import embed as real_embed

        embed = lambda texts: real_embed(texts, args.embedder)  # noqa: E731
    qv = np.ascontiguousarray(embed([f"When was {d.title} founded and by whom?" for d in docs]), dtype=np.float32)
    best_s = np.full((len(qv), 10), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(qv), 10), dtype=np.int64)
    for start, block in read_blocks(text / "vectors.npy"):  # exact top 10, block by block
        s = qv @ block.T
        cand_s = np.concatenate([best_s, s], axis=1)
        cand_i = np.concatenate([best_i, np.arange(start, start + len(block))[None, :].repeat(len(qv), 0)], axis=1)
        top = np.argpartition(-cand_s, 9, axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(cand_s, top, 1), np.take_along_axis(cand_i, top, 1)
    out = {}
    for ef in (64, 128, 256, 512):
        index.hnsw.efSearch = ef
        t0 = time.perf_counter()
        _, got = index.search(qv, 10)
        ms = (time.perf_counter() - t0) * 1000 / len(qv)
        rec = np.mean([len(set(g) & set(b)) / 10 for g, b in zip(got.tolist(), best_i.tolist())])
        out[f"ef{ef}"] = {"recall@10": round(float(rec), 4), "ms_per_query_batched": round(ms, 3)}
    return out


def pct(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"p50": round(statistics.median(xs), 2), "p95": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 2)}


def run_child(kind: str, argv: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, *argv]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"{kind} failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / 1024 ** 3:.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--documents", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embedder", choices=["hash", "minilm", "minilm-int8"], default="hash")
    ap.add_argument("--engine", default="faiss")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--minilm-sample", type=int, default=0)
    ap.add_argument("--sample-embedder", choices=["minilm", "minilm-int8"], default="minilm",
                    help="the embedder --minilm-sample measures")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("artifacts/bench/world-text"))
    ap.add_argument("--child", choices=["build", "minilm", "query", "recall"])
    ap.add_argument("--world", type=Path)
    ap.add_argument("--corpus", type=Path)
    args = ap.parse_args(argv)
    if args.child:
        fn = {"build": child_build, "minilm": child_minilm, "query": child_query, "recall": child_recall}[args.child]
        print(json.dumps(fn(args)))
        return 0

    import gen_passages as G

    args.out.mkdir(parents=True, exist_ok=True)
    corpus = args.out / f"psgs-{args.documents}-s{args.seed}.tsv"
    if not corpus.exists():
        info = G.write(corpus, "dpr-tsv", args.documents, args.seed)
        print(f"generated {corpus} ({info['bytes'] / 1e6:.0f} MB, {info['seconds']} s)", file=sys.stderr)
    world = args.out / f"world-{args.documents}-{args.embedder}-{args.engine}"
    common = ["--documents", str(args.documents), "--embedder", args.embedder, "--engine", args.engine,
              "--batch-size", str(args.batch_size), "--world", str(world), "--corpus", str(corpus),
              "--queries", str(args.queries), "--minilm-sample", str(args.minilm_sample),
              "--sample-embedder", args.sample_embedder]
    build = run_child("build", common)
    sec = build["section"]
    n = sec["passages"]
    report = {"documents": args.documents, "passages": n, "embedder": args.embedder, "engine": args.engine,
              "dense": sec["dense"], "wall_s": build["wall_s"], "stage_seconds": sec["seconds"],
              "passages_per_s": round(n / build["wall_s"], 1),
              "stage_passages_per_s": {k: round(n / v, 1) for k, v in sec["seconds"].items() if v},
              "peak_rss": gib(build["peak_rss"]), "peak_rss_ratio_vs_4GiB": round(build["peak_rss"] / TARGET_RSS, 3),
              "sizes_mb": {k: round(v / 1e6, 1) for k, v in build["sizes"].items()}}
    if args.minilm_sample:
        m = run_child("minilm", common)
        other = sum(v for k, v in sec["seconds"].items() if k != "embed")
        report["minilm"] = {**m, "peak_rss": gib(m["peak_rss"]),
                            "projected_build_hours": round((n / m["passages_per_s"] + other) / 3600, 2)}
    q = run_child("query", common)
    q["rss_after_open"] = gib(q["rss_after_open"])
    report["query"] = q
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
