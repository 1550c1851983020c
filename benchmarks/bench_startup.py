"""Cold start of `hqa ask` on the embedded default: where the seconds go, against the 3 s target.

Each stage runs in a fresh interpreter (`python -c`), so every number is a cold first use in a new process, the
way a user pays it: the CLI module import, dspy, the sentence-embedding stack (torch + transformers +
sentence-transformers) and the first MiniLM encode, llama-cpp with the SmolLM2 GGUF loaded, the toolbox's knowledge
sources (pack manifest, entity linker, BM25 index, dense index), and finally the whole `hqa ask` command.

    python benchmarks/bench_startup.py [--repeat 3] [--question "Who is the author of Animal Farm?"]

Prints the median of each stage and the ratio of the whole command to the 3 s target; writes
benchmarks/results/startup.md.  Needs a built pack (`hqa pack build`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 3.0

STAGES = {
    "python itself": "pass",
    "import hqa.cli": "import hqa.cli",
    "import dspy": "import dspy",
    "embedder: import + first encode": "from hqa.retrievers.embed import embed; embed(['warm up'])",
    "LM: llama-cpp + SmolLM2 GGUF load": ("from hqa.config import load_settings; from hqa.lm import build_lm; "
                                          "build_lm(load_settings())"),
    "toolbox: linker + BM25 + dense": ("from hqa.config import load_settings; from hqa.retrievers.registry import "
                                       "Toolbox; tb = Toolbox(load_settings()); tb.linker; tb.bm25; tb.dense"),
}


def timed(argv: list[str]) -> float:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} … failed:\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--question", default="Who is the author of Animal Farm?")
    args = ap.parse_args()

    rows = []
    for name, code in STAGES.items():
        times = [timed([sys.executable, "-c", code]) for _ in range(args.repeat)]
        rows.append((name, statistics.median(times)))
        print(f"{name:40s} {rows[-1][1]:6.2f} s", flush=True)
    whole = [timed([sys.executable, "-m", "hqa.cli", "ask", args.question]) for _ in range(args.repeat)]
    total = statistics.median(whole)
    print(f"{'hqa ask (whole command)':40s} {total:6.2f} s  → {total / TARGET_S:.1f}x the {TARGET_S:.0f} s target")

    out = REPO / "benchmarks" / "results" / "startup.md"
    lines = [f"# Cold start of `hqa ask` (median of {args.repeat} fresh processes per stage)", "",
             f"`python benchmarks/bench_startup.py --repeat {args.repeat}`; each stage is its own fresh interpreter "
             "(stages overlap: the whole command pays most of them once).", "",
             "| stage | seconds |", "|---|---|"]
    lines += [f"| {name} | {sec:.2f} |" for name, sec in rows]
    lines += [f"| **hqa ask, whole command** | **{total:.2f}** ({total / TARGET_S:.1f}x the {TARGET_S:.0f} s target) |"]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
