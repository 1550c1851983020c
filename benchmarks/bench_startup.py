"""Cold start of `hqa ask` on the embedded default: where the seconds go, against the 3 s target.

Each stage runs in a fresh interpreter (`python -c`), so every number is a cold first use in a new process, the
way a user pays it: the CLI module import, dspy, the embedder (the packaged MiniLM on ONNX Runtime) and its first
encode, llama-cpp with the SmolLM2 GGUF loaded, the toolbox's knowledge sources (pack manifest, entity linker, BM25
index, dense index), and finally the whole `hqa ask` command — with DSPy's LM cache off (``HQA_LM__CACHE=false``), so
an LM call really runs (the shipped default asks the LM only when the evidence offers no candidate answer).  The
whole command is measured twice per thread setting, each time with a new empty folder of persisted llama.cpp prompt
states (``lm.prompt_states_dir``): the *first process* finds none and evaluates its whole prompt; the *next
processes* (``--repeat`` runs after it, other questions of the same program) restore the predictor's instructions and
demos from the state the first one left.  One more run of the whole command reports, from the engine's counters, how
much of it was the LM decoding prompts and generating, and how much everything else.

    python benchmarks/bench_startup.py [--repeat 3] [--question "Who is the author of Animal Farm?"]
                                       [--lm-threads 0,1] [--baseline-commit a71fff5]

``--lm-threads``: the whole command is measured per ``lm.n_threads`` value (0 = llama.cpp's default: one thread to
generate, every core for prompt batches).  ``--baseline-commit``: also time the whole command of that commit (in a
temporary git worktree, same venv and pack, same LM-cache-off setting).  Prints the ratio of each whole command to
the 3 s target and to the 8.44 s measured before the ONNX embedder (that figure was taken with DSPy's LM cache
answering both calls, i.e. without LM compute); writes benchmarks/results/startup.md.  Needs a built pack.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 3.0
OTHER_QUESTION = "Who directed the movie Pulp Fiction?"  # what the first process asks before the measured ones
NO_LM = ("prompt_seconds", "completion_seconds", "evaluated", "prompt_tokens")
BEFORE_S = 8.44  # `python benchmarks/bench_startup.py --repeat 2` at a71fff5 (torch embedding stack; LM cache hits)

STAGES = {
    "python itself": "pass",
    "import hqa.cli.entry": "import hqa.cli.entry",
    "import dspy": "import dspy",
    "embedder: import + first encode (ONNX Runtime)": "from hqa.retrievers.embedding.encoders import embed; embed(['warm up'])",
    "LM: llama-cpp + SmolLM2 GGUF load": ("from hqa.config import load_settings; from hqa.lm.models import settings_engine; "
                                          "settings_engine(load_settings())._model()"),
    "toolbox: linker + BM25 + dense": ("from hqa.config import load_settings; from hqa.toolbox import "
                                       "Toolbox; tb = Toolbox(load_settings()); tb.linker; tb.bm25; tb.dense"),
}

# the whole command in-process, then the engine's counters on stderr (hqa.lm.models keeps one engine per configuration)
BREAKDOWN = """
import json, sys, time
start = time.perf_counter()
from hqa.cli.entry import main
code = main(["ask", *sys.argv[1:]])
total = time.perf_counter() - start
import hqa.lm.models as L
stats = [e.stats for e in L._ENGINES.values()]
print("BREAKDOWN " + json.dumps({"total": total, "engines": stats, "modules": sorted(sys.modules)}), file=sys.stderr)
sys.exit(code)
"""


def env_for(**extra: str) -> dict[str, str]:
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
                HQA_LM__CACHE="false", **extra)


def timed(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} … failed:\n{proc.stderr[-2000:]}")
    return elapsed, proc.stderr


def baseline(commit: str, args: argparse.Namespace) -> float:
    """Median whole-command time of ``commit`` (its own code, this venv and this pack)."""
    tree = Path(tempfile.mkdtemp(prefix="hqa-baseline-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=REPO, check=True,
                   capture_output=True)
    try:
        env = env_for(PYTHONPATH=str(tree), HQA_PATHS__ARTIFACTS=str(REPO / "artifacts"))
        return statistics.median(timed([sys.executable, "-m", "hqa.cli", "ask", args.question], env, cwd=tree)[0]
                                 for _ in range(args.repeat))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--question", default="Who is the author of Animal Farm?")
    ap.add_argument("--lm-threads", default="0,1", help="comma-separated lm.n_threads values for the whole command")
    ap.add_argument("--baseline-commit", help="also time the whole command at this commit (e.g. a71fff5)")
    args = ap.parse_args()

    load_start = os.getloadavg()[0]
    rows = []
    for name, code in STAGES.items():
        times = [timed([sys.executable, "-c", code], env_for())[0] for _ in range(args.repeat)]
        rows.append((name, statistics.median(times)))
        print(f"{name:48s} {rows[-1][1]:6.2f} s", flush=True)

    wholes = []
    for threads in [int(t) for t in args.lm_threads.split(",")]:
        for which in ("first process", "next processes"):
            with tempfile.TemporaryDirectory(prefix="hqa-states-") as tmp:
                def states_env(run: str) -> dict[str, str]:  # a states folder of its own per `run`
                    return env_for(HQA_LM__N_THREADS=str(threads), HQA_LM__PROMPT_STATES_DIR=str(Path(tmp) / run))

                ask = [sys.executable, "-m", "hqa.cli", "ask", args.question]
                if which == "first process":  # each run with an empty folder
                    times = [timed(ask, states_env(str(i)))[0] for i in range(args.repeat)]
                    env = states_env("breakdown")
                else:  # a first process leaves its state (another question), then the measured ones restore it
                    env = states_env("shared")
                    timed([sys.executable, "-m", "hqa.cli", "ask", OTHER_QUESTION], env)
                    times = [timed(ask, env)[0] for _ in range(args.repeat)]
                total = statistics.median(times)
                _, err = timed([sys.executable, "-c", BREAKDOWN, args.question], env)
            info = json.loads(err.split("BREAKDOWN ", 1)[1].splitlines()[0])
            lm = info["engines"][0] if info["engines"] else dict.fromkeys(NO_LM, 0)  # no LM call: no engine
            heavy = [m for m in ("torch", "transformers", "sentence_transformers", "mlflow", "matplotlib", "fastapi",
                                 "requests_cache", "rdflib") if m in info["modules"]]
            wholes.append((f"lm.n_threads = {threads}, {which}", total, info["total"], lm, heavy))
            print(f"{'hqa ask, lm.n_threads=' + str(threads) + ', ' + which:48s} {total:6.2f} s  → "
                  f"{total / TARGET_S:.1f}x the {TARGET_S:.0f} s target, {total / BEFORE_S:.2f}x the {BEFORE_S} s "
                  f"before; one run: LM prompt {lm['prompt_seconds']:.2f} s ({lm['evaluated']} of "
                  f"{lm['prompt_tokens']} tokens decoded), LM generation "
                  f"{lm['completion_seconds'] - lm['prompt_seconds']:.2f} s, everything else "
                  f"{info['total'] - lm['completion_seconds']:.2f} s; imported: {heavy}", flush=True)
    base = baseline(args.baseline_commit, args) if args.baseline_commit else None
    if base is not None:
        print(f"{'hqa ask at ' + args.baseline_commit + ' (same settings)':48s} {base:6.2f} s", flush=True)

    out = REPO / "benchmarks" / "results" / "startup.md"
    cmd = f"python benchmarks/bench_startup.py --repeat {args.repeat} --lm-threads {args.lm_threads}" + (
        f" --baseline-commit {args.baseline_commit}" if args.baseline_commit else "")
    lines = [f"# Cold start of `hqa ask` (median of {args.repeat} fresh processes per row)", "",
             f"`{cmd}`; each stage is its own fresh interpreter (stages overlap: the whole command pays most of them "
             "once). The whole command runs with DSPy's LM cache off (`HQA_LM__CACHE=false`): an LM call the "
             "program makes is computed (0 of 0 tokens: it made none). *First process*: no persisted prompt state; "
             "*next processes*: the state a first process (another question) left in `lm.prompt_states_dir` is "
             "restored.", "",
             "| stage | seconds |", "|---|---|"]
    lines += [f"| {name} | {sec:.2f} |" for name, sec in rows]
    lines += ["", "| whole `hqa ask` | seconds | vs 3 s target | vs 8.44 s before | one run: LM prompt decode "
              "(evaluated of prompt tokens) | LM generation | everything else | heavy modules imported |",
              "|---|---|---|---|---|---|---|---|"]
    for label, total, one, lm, heavy in wholes:
        lines.append(f"| {label} | **{total:.2f}** | {total / TARGET_S:.2f}x | {total / BEFORE_S:.2f}x "
                     f"| {lm['prompt_seconds']:.2f} s ({lm['evaluated']} of {lm['prompt_tokens']}) | "
                     f"{lm['completion_seconds'] - lm['prompt_seconds']:.2f} s | "
                     f"{one - lm['completion_seconds']:.2f} s | {', '.join(heavy) or 'none'} |")
    if base is not None:
        lines.append(f"| {args.baseline_commit} (before), lm.n_threads = 0 | **{base:.2f}** | {base / TARGET_S:.2f}x | "
                     f"{base / BEFORE_S:.2f}x | | | | torch, transformers, sentence_transformers, ... |")
    lines += ["", f"Load average (1 min) at the start: {load_start:.1f}, at the end: {os.getloadavg()[0]:.1f} "
              "(shared 2-core machine)."]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
