"""How much slower hqa's steps between two LM calls run right after the process waited for the LM.

A question's work between LM calls (embedding a query, a dense search, Python bookkeeping) runs after the thread
slept through a call's latency.  On a machine whose caches other tenants share, the memory that work touches is
then no longer cached, and the same step takes longer than it does back to back.  This measures each step back to
back (the baseline) and after an idle gap of ``--gap`` seconds (default 0.3, the LM latency of
``bench_throughput.py``), and prints the ratio, e.g. ``faiss flat search (10,220 x 384) after 0.3 s idle: 21.6x``.

Steps: one question embedded by the packaged MiniLM (ONNX Runtime, float32: the query side of every program), the
same with its int8 copy, one exact inner-product search over a flat index the size of the leads' dense index, and a
pure-Python loop (dict inserts) standing for hqa's and DSPy's own code.

    python benchmarks/bench_idle_gap.py [--gap 0.3] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QUESTION = "Who directed the film that won the Academy Award for Best Picture in 1995?"


def python_loop() -> int:
    d = {}
    for i in range(20_000):
        d[str(i)] = i
    return len(d)


def timed(step, gap: float, repeats: int) -> float:
    """Median wall seconds of ``step()`` called ``repeats`` times, each after sleeping ``gap`` seconds."""
    step()
    walls = []
    for _ in range(repeats):
        time.sleep(gap)
        t = time.perf_counter()
        step()
        walls.append(time.perf_counter() - t)
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gap", type=float, default=0.3, help="idle seconds before each timed step")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()

    import faiss

    from hqa.retrievers.embedding import onnx_minilm

    rng = np.random.default_rng(0)
    index = faiss.IndexFlatIP(384)
    index.add(rng.standard_normal((10_220, 384)).astype(np.float32))
    query = rng.standard_normal((1, 384)).astype(np.float32)
    floats, int8 = onnx_minilm.load(), onnx_minilm.load(int8=True)
    steps = {"MiniLM float32, one question": lambda: floats.encode([QUESTION]),
             "MiniLM int8, one question": lambda: int8.encode([QUESTION]),
             "faiss flat search (10,220 x 384)": lambda: index.search(query, 10),
             "Python loop (20,000 dict inserts)": python_loop}
    for name, step in steps.items():
        warm, cold = timed(step, 0.0, args.repeats), timed(step, args.gap, args.repeats)
        print(f"{name} after {args.gap:g} s idle: {cold / warm:.1f}x  ({warm * 1000:.2f} ms back to back, "
              f"{cold * 1000:.2f} ms after the gap)", flush=True)


if __name__ == "__main__":
    main()
