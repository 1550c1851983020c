"""Embedding throughput of the packaged MiniLM: ONNX Runtime (what ``embed()`` runs) vs sentence-transformers (before).

Passages of ``--words`` words drawn (seeded) from the knowledge pack's passages, embedded in batches of
``--batch``; each backend uses ``--threads`` threads (ONNX Runtime ``intra_op_num_threads``, torch
``set_num_threads``).  Rows: one caller; two caller threads sharing the model (``embed()`` is called from several
threads; sentence-transformers calls are serialised by hqa, ONNX Runtime runs them concurrently); and ONNX Runtime
with 1 intra-op thread.  Texts per second of wall time and per CPU-second (the second is steadier on a shared
machine); the ratio is ONNX / sentence-transformers.  Vectors of both backends are compared too (min cosine).

    python benchmarks/bench_embed.py [--n 512] [--batch 64] [--words 100] [--threads 2] [--repeat 3]

Writes benchmarks/results/embed.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def passages(n: int, words: int, seed: int = 0) -> list[str]:
    vocab = " ".join(json.loads(line)["text"] for line in
                     (REPO / "artifacts" / "pack" / "passages.jsonl").read_text(encoding="utf-8").splitlines()).split()
    rng = random.Random(seed)
    return [" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(n)]


def measure(encode, texts: list[str], callers: int, repeat: int) -> tuple[float, float]:
    """Median texts/s (wall) and texts per CPU-second over ``repeat`` runs; ``callers`` threads split the texts."""
    encode(texts[:8])  # warm-up
    walls, cpus = [], []
    for _ in range(repeat):
        parts = [texts[i::callers] for i in range(callers)]
        threads = [threading.Thread(target=encode, args=(p,)) for p in parts]
        start, cpu = time.perf_counter(), time.process_time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        walls.append(len(texts) / (time.perf_counter() - start))
        cpus.append(len(texts) / (time.process_time() - cpu))
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--words", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import torch

    from hqa.retrievers.embedding import onnx_minilm
    from hqa.retrievers.embedding.encoders import SentenceTransformerEmbedder

    texts = passages(args.n, args.words)
    torch.set_num_threads(args.threads)
    st = SentenceTransformerEmbedder(str(onnx_minilm.source_dir()))  # hqa's sentence-transformers path, same model
    onnx = onnx_minilm.OnnxMiniLM(onnx_minilm.ensure_onnx(), threads=args.threads)
    onnx1 = onnx_minilm.OnnxMiniLM(onnx_minilm.ensure_onnx(), threads=1)
    tokens = np.mean([len(e.ids) for e in onnx._tokenizer.encode_batch(texts)])

    def unit(v):
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    cosine = float(np.min(np.sum(unit(onnx.encode(texts[:64], args.batch)) * unit(st.encode(texts[:64], args.batch)),
                                 axis=1)))
    rows = []
    for label, model, callers in (("sentence-transformers (torch), 1 caller", st, 1),
                                  (f"ONNX Runtime, intra_op {args.threads}, 1 caller", onnx, 1),
                                  (f"ONNX Runtime, intra_op 1, 1 caller", onnx1, 1),
                                  ("sentence-transformers (torch), 2 callers", st, 2),
                                  (f"ONNX Runtime, intra_op {args.threads}, 2 callers", onnx, 2),
                                  ("ONNX Runtime, intra_op 1, 2 callers", onnx1, 2)):
        wall, cpu = measure(lambda t, m=model: m.encode(t, args.batch), texts, callers, args.repeat)
        rows.append((label, wall, cpu))
        print(f"{label:48s} {wall:7.1f} texts/s  {cpu:7.1f} texts/CPU-s", flush=True)
    base = {1: rows[0], 2: rows[3]}
    lines = [f"# MiniLM embedding throughput: ONNX Runtime vs sentence-transformers", "",
             f"`python benchmarks/bench_embed.py --n {args.n} --batch {args.batch} --words {args.words} --threads "
             f"{args.threads} --repeat {args.repeat}` — {args.n} passages of {args.words} words ({tokens:.0f} word "
             f"pieces on average), batch {args.batch}, median of {args.repeat}; min cosine ONNX vs "
             f"sentence-transformers over 64 of them: {cosine:.7f}.", "",
             "| backend | texts / s (wall) | texts / CPU-second | wall vs sentence-transformers, same callers |",
             "|---|---|---|---|"]
    for i, (label, wall, cpu) in enumerate(rows):
        ref = base[2 if i >= 3 else 1]
        lines.append(f"| {label} | {wall:.1f} | {cpu:.1f} | {wall / ref[1]:.2f}x |")
    out = REPO / "benchmarks" / "results" / "embed.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"min cosine {cosine:.7f}; wrote {out}")


if __name__ == "__main__":
    main()
