"""Prompt-prefix KV cache of the embedded llama.cpp engine: prompt tokens evaluated vs reused and seconds per question.

For each program, the same questions are answered twice in fresh processes — ``lm.prompt_cache_mb = 0`` (llama.cpp
reuses only the prefix shared with the prompt it evaluated last) and the default size — with DSPy's LM cache off
(``lm.cache = false``, every call reaches the model).  The numbers are read from the engine's own counters
(``LlamaCppEngine.stats`` / ``history``: per call, prompt tokens evaluated and reused, prompt wall and CPU seconds,
state restore / save seconds), not estimated.  Greedy decoding, so the answers of the two runs must be identical;
the script says whether they are.

    python benchmarks/bench_kv_cache.py [--programs simple,hqa] [--dataset humaniq-compmix:answerable] [--limit 10]
                                        [--lm-threads 1] [--cache-mb 1024]

``--lm-threads 1`` (default) pins llama.cpp to one thread for prompt batches and generation: on this shared 2-core
machine its default of two prompt threads is several times slower and far noisier whenever another process runs.
Writes benchmarks/results/kv_cache.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_arm(program: str, dataset: str, limit: int) -> dict:
    """Answer the questions in this process with the settings in the environment; the engine's counters."""
    from hqa.app import open_program
    from hqa.config import load_settings
    from hqa.lm.models import settings_engine
    from hqa.data.datasets import load_examples

    settings = load_settings()
    examples = load_examples(dataset, limit)
    opened = open_program(settings, program=program)
    engine = settings_engine(settings)
    engine._model()  # load outside the timed loop
    engine.reset_stats()
    answers, seconds = [], []
    for ex in examples:
        start = time.perf_counter()
        answers.append(str(opened.program(question=ex.question).answer))
        seconds.append(time.perf_counter() - start)
    return {"answers": answers, "seconds": seconds, "stats": engine.stats,
            "calls": [dataclasses.asdict(c) for c in engine.history]}


def spawn(program: str, cache_mb: int, args: argparse.Namespace) -> dict:
    # states on disk off: this measures reuse within one process (bench_startup.py measures the next process's)
    env = dict(os.environ, HQA_LM__CACHE="false", HQA_LM__PROMPT_CACHE_MB=str(cache_mb), HQA_LM__PROMPT_STATES_MB="0",
               HQA_LM__N_THREADS=str(args.lm_threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, __file__, "--arm", program, "--dataset", args.dataset,
                           "--limit", str(args.limit)], capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{program} with prompt_cache_mb={cache_mb} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise(arm: dict) -> dict:
    s, n = arm["stats"], len(arm["answers"])
    return {"questions": n, "calls_per_q": s["calls"] / n, "prompt_tokens_per_q": s["prompt_tokens"] / n,
            "evaluated_per_q": s["evaluated"] / n, "reused_per_q": s["reused"] / n,
            "prompt_s_per_q": s["prompt_seconds"] / n, "prompt_cpu_s_per_q": s["prompt_cpu_seconds"] / n,
            "restore_save_s_per_q": (s["restore_seconds"] + s["save_seconds"]) / n,
            "s_per_q": sum(arm["seconds"]) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default="simple,hqa")
    ap.add_argument("--dataset", default="humaniq-compmix:answerable")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--lm-threads", type=int, default=1)
    ap.add_argument("--cache-mb", type=int, default=1024)
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.dataset, args.limit)))
        return

    rows = []
    for program in [p.strip() for p in args.programs.split(",") if p.strip()]:
        off, on = spawn(program, 0, args), spawn(program, args.cache_mb, args)
        a, b = summarise(off), summarise(on)
        same = off["answers"] == on["answers"]
        saved = a["prompt_s_per_q"] - b["prompt_s_per_q"]
        rows.append((program, a, b, same, saved))
        print(f"{program}: prompt tokens/q {a['prompt_tokens_per_q']:.0f}; evaluated {a['evaluated_per_q']:.0f} -> "
              f"{b['evaluated_per_q']:.0f} (reused {b['reused_per_q']:.0f}); prompt s/q {a['prompt_s_per_q']:.2f} -> "
              f"{b['prompt_s_per_q']:.2f} (saved {saved:.2f} s, {b['prompt_s_per_q'] / a['prompt_s_per_q']:.2f}x); "
              f"prompt CPU s/q {a['prompt_cpu_s_per_q']:.2f} -> {b['prompt_cpu_s_per_q']:.2f}; s/q {a['s_per_q']:.2f} "
              f"-> {b['s_per_q']:.2f}; answers identical: {same}", flush=True)

    out = REPO / "benchmarks" / "results" / "kv_cache.md"
    cmd = (f"python benchmarks/bench_kv_cache.py --programs {args.programs} --dataset {args.dataset} --limit "
           f"{args.limit} --lm-threads {args.lm_threads} --cache-mb {args.cache_mb}")
    lines = ["# Prompt-prefix KV cache of the embedded engine (SmolLM2-135M, llama.cpp)", "",
             f"`{cmd}` — DSPy's LM cache off, greedy decoding, each arm a fresh process, numbers from the engine's "
             "counters (per question = total / questions). Baseline: `lm.prompt_cache_mb = 0` (llama.cpp's own "
             "reuse of the prefix shared with the last prompt only).", "",
             "| program | prompt_cache_mb | LM calls / q | prompt tokens / q | evaluated / q | reused / q | "
             "prompt s / q (wall) | prompt CPU s / q | restore+save s / q | s / q (whole question) | answers "
             "identical |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for program, a, b, same, saved in rows:
        for mb, r in ((0, a), (args.cache_mb, b)):
            lines.append(f"| {program} | {mb} | {r['calls_per_q']:.1f} | {r['prompt_tokens_per_q']:.0f} | "
                         f"{r['evaluated_per_q']:.0f} | {r['reused_per_q']:.0f} | {r['prompt_s_per_q']:.2f} | "
                         f"{r['prompt_cpu_s_per_q']:.2f} | {r['restore_save_s_per_q']:.3f} | {r['s_per_q']:.2f} | "
                         f"{same if mb else ''} |")
        lines.append(f"| **{program}: saved per question** | | | | "
                     f"{a['evaluated_per_q'] - b['evaluated_per_q']:.0f} tokens | | **{saved:.2f} s** "
                     f"({b['prompt_s_per_q'] / a['prompt_s_per_q']:.2f}x) | "
                     f"{a['prompt_cpu_s_per_q'] - b['prompt_cpu_s_per_q']:.2f} s | | "
                     f"{a['s_per_q'] - b['s_per_q']:.2f} s | |")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
