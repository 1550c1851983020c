"""Time per-question DPP demo selection (k=3 of the 59 human traces) with the packaged MiniLM on CPU.

Measured per question: embedding the question + relevance + DPP greedy MAP (library embeddings and the action
similarity matrix are precomputed at compile).  Also measured: a whole ``DPPProgram`` call with ``DummyLM`` (adds
deep-copying the student, building the demos and dspy's prompt formatting).  Target: 200 ms per selection.

    python benchmarks/bench_dpp.py [--n 50] [--k 3] [--mode dpp]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

TARGET_MS = 200.0
QUESTION_FILE = "humaniq/data/mintaka.txt"  # in the data directory (hqa data pull humaniq-questions)


def _questions(n: int) -> list[str]:
    qs: list[str] = []
    from hqa.data.store import require

    path = require(QUESTION_FILE)
    if path.is_file():
        qs = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    while len(qs) < n:  # fallback: synthetic questions
        qs.append(f"Which film directed by director number {len(qs)} won the most awards?")
    return qs[:n]


def _stats(label: str, ms: list[float]) -> float:
    med = statistics.median(ms)
    p90 = sorted(ms)[int(0.9 * (len(ms) - 1))]
    print(f"{label:<34} median {med:7.2f} ms   p90 {p90:7.2f} ms   max {max(ms):7.2f} ms   "
          f"median/target {med / TARGET_MS:.3f}")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--mode", default="dpp")
    args = ap.parse_args()

    import dspy
    from dspy.utils import DummyLM

    from hqa.data.human import load_human_library
    from hqa.optimize.compile import DPPFewShot

    class Student(dspy.Module):
        def __init__(self):
            super().__init__()
            self.react = dspy.Predict("question, trajectory -> next_thought, next_tool_name, next_tool_args")

        def forward(self, question):
            return self.react(question=question, trajectory="")

    library = load_human_library()
    t0 = time.perf_counter()
    prog = DPPFewShot(k=args.k, mode=args.mode).compile(Student(), trainset=library)
    compile_s = time.perf_counter() - t0
    print(f"library: {len(library)} demos; compile (model load + library embedding): {compile_s:.2f} s")

    questions = _questions(args.n)
    prog.select("warm-up question?")  # first call pays one-off torch initialisation

    select_ms = []
    for q in questions:
        t = time.perf_counter()
        picked = prog.select(q)
        select_ms.append((time.perf_counter() - t) * 1000)
        assert len(picked) == args.k

    lm = DummyLM([{"next_thought": "t", "next_tool_name": "WikiSearch", "next_tool_args": "x"}] * len(questions))
    call_ms = []
    with dspy.context(lm=lm):
        for q in questions:
            t = time.perf_counter()
            prog(question=q)
            call_ms.append((time.perf_counter() - t) * 1000)

    print(f"{len(questions)} questions, k={args.k}, mode={args.mode}, target {TARGET_MS:.0f} ms")
    _stats("select (embed query + DPP)", select_ms)
    _stats("DPPProgram call (DummyLM)", call_ms)


if __name__ == "__main__":
    main()
