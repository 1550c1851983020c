"""Vector engines on the same vectors: faiss IndexFlatIP (exact, the baseline), faiss IndexHNSWFlat, Milvus Lite
embedded (``MilvusClient("x.db")``) and the same Milvus client against a ``milvus-lite server`` on loopback (the code
path of a Milvus Standalone / Distributed deployment).

Per engine: build time (insert + index), recall@10 against exact search, single-query latency p50 / p95 (k=10, one
query per call, as a retrieval hop searches) and the RSS it added (for the server: the server process's RSS).

The vectors: ``--real R`` generated passages (benchmarks/gen_passages.py) embedded with the real all-MiniLM-L6-v2
(:func:`hqa.retrievers.embedding.encoders.embed`), cached under ``--out``; to reach ``--n`` vectors the rest are drawn
around them (a real vector + Gaussian noise, renormalised; cosine to its anchor ≈ ``--anchor-cos``), so the set is
clustered the way real embeddings are, not uniform.  The queries are real MiniLM embeddings of questions about the real
passages ("When was <title> founded?").  On this 2-core machine MiniLM embeds tens of passages per second, which is why
the large sets are anchored rather than all real.

Usage: ``nice -n 10 python benchmarks/bench_vectors.py --n 100000 --real 2000`` (``--engines faiss-flat,faiss-hnsw``
to leave Milvus out).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
ENGINES = ("faiss-flat", "faiss-hnsw", "milvus-lite", "milvus-server")


def rss() -> int:
    """Resident set size of this process now (bytes)."""
    return rss_of(os.getpid())


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def real_vectors(out: Path, r: int, q: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``r`` MiniLM passage vectors and ``q`` MiniLM query vectors (cached); passages/s of the embedding."""
    import gen_passages as G
    from hqa.retrievers.dense import passage_text
    from hqa.retrievers.embedding.encoders import embed

    cache = out / f"real-r{r}-q{q}-s{seed}.npz"
    if cache.exists():
        z = np.load(cache)
        return z["passages"], z["queries"], float(z["rate"])
    docs = [G.document(i, r, seed) for i in range(r)]
    texts = [passage_text({"title": d.title, "text": " ".join(" ".join(d.paragraphs).split()[:100])}) for d in docs]
    rng = np.random.default_rng(seed + 1)
    questions = [f"When was {docs[int(i)].title} founded?" for i in rng.integers(0, r, size=q)]
    embed(texts[:4])
    t0 = time.perf_counter()
    passages = np.concatenate([embed(texts[i:i + 64], batch_size=64) for i in range(0, r, 64)])
    rate = r / (time.perf_counter() - t0)
    queries = embed(questions, batch_size=64)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(cache, passages=passages, queries=queries, rate=rate)
    return passages, queries, rate


def anchored(real: np.ndarray, n: int, anchor_cos: float, seed: int) -> np.ndarray:
    """``n`` vectors: the real ones, then anchor + noise with E[cos(anchor, v)] ≈ ``anchor_cos``."""
    if n <= len(real):
        return np.ascontiguousarray(real[:n])
    d = real.shape[1]
    sigma = np.sqrt((1 / anchor_cos ** 2 - 1) / d)
    rng = np.random.default_rng(seed)
    out = np.empty((n, d), dtype=np.float32)
    out[: len(real)] = real
    for lo in range(len(real), n, 100_000):
        hi = min(n, lo + 100_000)
        v = real[rng.integers(0, len(real), size=hi - lo)] + rng.normal(0, sigma, size=(hi - lo, d)).astype(np.float32)
        out[lo:hi] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def exact_top(x: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    import faiss

    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index.search(queries, k)[1]


def pct(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return round(statistics.median(xs), 3), round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 3)


def timed_queries(search, queries: np.ndarray, truth: np.ndarray, k: int) -> dict:
    search(queries[0], k)
    lat, hit = [], 0
    for q, t in zip(queries, truth):
        t0 = time.perf_counter()
        rows = search(q, k)
        lat.append((time.perf_counter() - t0) * 1000)
        hit += len(set(int(r) for r in rows) & set(int(x) for x in t))
    p50, p95 = pct(lat)
    return {"recall@10": round(hit / (len(queries) * k), 4), "p50_ms": p50, "p95_ms": p95}


def bench_faiss(x: np.ndarray, queries: np.ndarray, truth: np.ndarray, kind: str) -> dict:
    import faiss

    from hqa.retrievers.dense import HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH, HNSW_M

    before = rss()
    t0 = time.perf_counter()
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(x.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    else:
        index = faiss.IndexFlatIP(x.shape[1])
    for lo in range(0, len(x), 50_000):
        index.add(x[lo:lo + 50_000])
    if kind == "hnsw":
        index.hnsw.efSearch = HNSW_EF_SEARCH
    build = time.perf_counter() - t0
    res = timed_queries(lambda q, k: index.search(q[None, :], k)[1][0], queries, truth, 10)
    out = {"build_s": round(build, 1), **res, "rss_added_mb": round((rss() - before) / 1e6)}
    del index
    return out


def bench_milvus(x: np.ndarray, queries: np.ndarray, truth: np.ndarray, uri: str, server_pid: int | None) -> dict:
    from hqa.retrievers.dense import HNSW_EF_SEARCH
    from hqa.retrievers.vectors import milvus_client, milvus_finish, release_local

    before = rss() if server_pid is None else rss_of(server_pid)
    client = milvus_client(uri)
    from pymilvus import DataType, MilvusClient

    name = "bench"
    if client.has_collection(name):
        client.drop_collection(name)
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("row", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=x.shape[1])
    client.create_collection(name, schema=schema)
    t0 = time.perf_counter()
    for lo in range(0, len(x), 5_000):
        client.insert(name, [{"row": lo + i, "vec": v} for i, v in enumerate(x[lo:lo + 5_000])])
    insert = time.perf_counter() - t0
    t0 = time.perf_counter()
    milvus_finish(client, name)
    index = time.perf_counter() - t0
    params = {"metric_type": "IP", "params": {"ef": HNSW_EF_SEARCH}}

    def search(q, k):
        res = client.search(name, data=[q.tolist()], limit=k, anns_field="vec", output_fields=["row"],
                            search_params=params)
        return [h["row"] for h in res[0]]

    res = timed_queries(search, queries, truth, 10)
    after = rss() if server_pid is None else rss_of(server_pid)
    client.drop_collection(name)
    client.close()
    release_local(uri)
    return {"build_s": round(insert + index, 1), "insert_s": round(insert, 1), "index_s": round(index, 1), **res,
            "rss_added_mb": round((after - before) / 1e6)}


def start_server(data: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "milvus-lite"
    proc = subprocess.Popen([str(exe), "server", "--data-dir", str(data), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("milvus-lite server did not start")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--real", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--anchor-cos", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--out", type=Path, default=Path("artifacts/bench/vectors"))
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    real, queries, rate = real_vectors(args.out, args.real, args.queries, args.seed)
    x = anchored(real, args.n, args.anchor_cos, args.seed)
    nn = exact_top(real, real[:200], 2)[:, 1]  # how clustered the real vectors are: cosine to the nearest other
    t0 = time.perf_counter()
    truth = exact_top(x, queries, 10)
    report = {"n": args.n, "real": args.real, "queries": len(queries), "anchor_cos": args.anchor_cos,
              "minilm_passages_per_s": round(rate, 1), "exact_search_all_queries_s": round(time.perf_counter() - t0, 2),
              "real_nn_cos_median": round(float(np.median(np.sum(real[:200] * real[nn], axis=1))), 3),
              "engines": {}}
    for engine in engines:
        print(f"{engine} ...", file=sys.stderr, flush=True)
        if engine.startswith("faiss"):
            report["engines"][engine] = bench_faiss(x, queries, truth, engine.split("-")[1])
        elif engine == "milvus-lite":
            folder = args.out / "lite.db"
            shutil.rmtree(folder, ignore_errors=True)
            report["engines"][engine] = bench_milvus(x, queries, truth, str(folder), None)
            shutil.rmtree(folder, ignore_errors=True)
        elif engine == "milvus-server":
            data = args.out / "server-data"
            shutil.rmtree(data, ignore_errors=True)
            proc, uri = start_server(data)
            try:
                report["engines"][engine] = bench_milvus(x, queries, truth, uri, proc.pid)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
                shutil.rmtree(data, ignore_errors=True)
        print(json.dumps({engine: report["engines"][engine]}), file=sys.stderr, flush=True)
    base = report["engines"].get("faiss-flat")
    if base:
        for r in report["engines"].values():
            r["p50_ratio_vs_flat"] = round(r["p50_ms"] / base["p50_ms"], 4) if base["p50_ms"] else None
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
