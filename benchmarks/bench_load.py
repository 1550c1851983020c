"""Load test on loopback: N questions through `hqa evaluate --threads T` against real servers.

The LM runs behind `python -m llama_cpp.server` (OpenAI-compatible, one process, n_ctx 4096), SPARQL goes to
`oxigraph serve-read-only` over the knowledge pack; the `simple` program (2 LM calls + dense/BM25/SPARQL retrieval
and a rerank per question), LM cache off, configured only through HQA_* environment variables.  Checks that no
result is lost (N rows, N unique ids, no question failed because a server was overloaded) and prints throughput —
wall clock including start-up, and steady state (first to last row) — for a baseline with `--threads 1` on a
smaller run and the loaded run.

    python benchmarks/bench_load.py [--n 200] [--baseline-n 20] [--threads 8] [--max-tokens 64]

Writes the printed table to benchmarks/results/load.md.  A benchmark, not a test: it takes a while.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from standins.servers import stop, wait_http  # noqa: E402


def run_eval(env: dict, n: int, threads: int, out: Path) -> dict:
    """Run `hqa evaluate`, watching the predictions file to time the first and the last row."""
    from hqa.schemas.run_folder import RunFolder

    rows_file = RunFolder(out).rows_path
    cmd = [sys.executable, "-m", "hqa.cli", "evaluate", "--program", "simple", "--dataset", "compmix/test",
           "--limit", str(n), "--threads", str(threads), "--out", str(out), "--fresh"]
    start = time.monotonic()
    first = last = None
    seen = 0
    with open(out.parent / f"{out.name}.stderr", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
        try:
            while proc.poll() is None:
                count = len(rows_file.read_text().splitlines()) if rows_file.exists() else 0
                if count > seen:
                    now = time.monotonic()
                    first = first if first is not None else now
                    last, seen = now, count
                if time.monotonic() - start > 4 * 3600:
                    raise SystemExit("evaluation took more than 4 hours")
                time.sleep(0.25)
        finally:
            stop(proc, grace=30)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"hqa evaluate failed ({proc.returncode}):\n"
                         + (out.parent / f"{out.name}.stderr").read_text()[-3000:])
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    count = len(rows)
    if count > seen:  # rows written in the last poll interval
        last = time.monotonic() if last is None else last
    secs = sorted(r["seconds"] for r in rows)
    return {
        "n": n, "threads": threads, "wall": wall, "rows": count, "unique": len({r["id"] for r in rows}),
        "errors": sum(1 for r in rows if r.get("error")), "degraded": sum(1 for r in rows if r.get("degraded")),
        "sparql_errors": sum(1 for r in rows for q in r["trace"].get("sparql", []) if q.get("error")),
        "lm_calls": sum(r.get("lm_calls", 0) for r in rows),
        "qps_wall": count / wall,
        "qps_steady": (count - 1) / (last - first) if first is not None and last and last > first else float("nan"),
        "startup": (first - start) if first is not None else float("nan"),
        "p50": statistics.median(secs) if secs else float("nan"),
        "p95": secs[min(len(secs) - 1, int(0.95 * len(secs)))] if secs else float("nan"),
        "error_samples": [r["error"] for r in rows if r.get("error")][:3],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--baseline-n", type=int, default=20)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64, help="LM reply cap (the answers are short)")
    ap.add_argument("--n-ctx", type=int, default=4096)
    args = ap.parse_args()

    from hqa.config import load_settings
    from hqa.lm.models import packaged_gguf
    from standins.servers import free_port, oxigraph_binary, wait_port

    def on_term(signum, frame):  # a kill still tears the servers down (the finally below)
        raise SystemExit(f"bench_load: stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    settings = load_settings()
    lm_port, kg_port = free_port(), free_port()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    base_env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    servers = [subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host",
                                 "127.0.0.1", "--port", str(lm_port), "--n_ctx", str(args.n_ctx), "--model_alias",
                                 "smollm2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=base_env,
                                start_new_session=True)]
    tmp = Path(tempfile.mkdtemp(prefix="hqa-load-"))
    try:
        servers.append(subprocess.Popen([oxigraph_binary(), "serve-read-only", "--location", str(settings.kg_path),
                                         "--bind", f"127.0.0.1:{kg_port}", "--union-default-graph"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        wait_http(f"http://127.0.0.1:{lm_port}/v1/models", servers[0], seconds=180)
        wait_port(kg_port, servers[1], seconds=30)
        env = dict(base_env, HQA_LM__PROVIDER="openai_compatible", HQA_LM__API_BASE=f"http://127.0.0.1:{lm_port}/v1",
                   HQA_LM__MODEL="smollm2", HQA_LM__CACHE="false", HQA_LM__MAX_TOKENS=str(args.max_tokens),
                   HQA_KG__KIND="sparql", HQA_KG__ENDPOINT=f"http://127.0.0.1:{kg_port}/query",
                   HQA_PATHS__ARTIFACTS=str(settings.artifacts_dir))
        print(f"baseline: {args.baseline_n} questions, --threads 1 ...", flush=True)
        base = run_eval(env, args.baseline_n, 1, tmp / "base")
        print(f"load: {args.n} questions, --threads {args.threads} ...", flush=True)
        load = run_eval(env, args.n, args.threads, tmp / "load")
        died = [name for name, p in zip(("llama_cpp.server", "oxigraph"), servers) if p.poll() is not None]
        if died:  # the numbers would measure an outage, not the load
            raise SystemExit(f"{', '.join(died)} exited during the run; errors: {load['errors']}, "
                             f"e.g. {load['error_samples'][:1]}")
    finally:
        for p in servers:
            stop(p, grace=30)
        shutil.rmtree(tmp, ignore_errors=True)

    lost = args.n - load["unique"]

    def line(name: str, r: dict) -> str:
        return (f"| {name} | {r['n']} | {r['threads']} | {r['wall']:.1f} | {r['startup']:.1f} | {r['qps_wall']:.3f} | "
                f"{r['qps_steady']:.3f} | {r['p50']:.1f} / {r['p95']:.1f} | {r['rows']} | {r['unique']} | "
                f"{r['errors']} | {r['degraded']} | {r['sparql_errors']} | {r['lm_calls'] / max(r['rows'], 1):.2f} |")

    lines = [
        "# Load test: `hqa evaluate --program simple` against llama_cpp.server + oxigraph serve-read-only",
        "",
        f"Machine: {os.cpu_count()} CPU cores, {platform.machine()}, Python {platform.python_version()}; "
        f"LM SmolLM2-135M-Instruct Q4_1 in one llama_cpp.server process (n_ctx {args.n_ctx}, replies capped at "
        f"{args.max_tokens} tokens, LM cache off); dataset compmix/test (first N questions).",
        "",
        "| run | questions | threads | wall s | start-up s | q/s (wall) | q/s (steady) | s/question p50 / p95 | rows | "
        "unique ids | errors | degraded | SPARQL errors | LM calls/q |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        line("baseline", base),
        line("load", load),
        "",
        f"Throughput ratio, threads {args.threads} vs 1: {load['qps_wall'] / base['qps_wall']:.2f}x wall clock, "
        f"{load['qps_steady'] / base['qps_steady']:.2f}x steady state.  Lost results: {lost}.",
        "",
        "Start-up is process launch to first row (imports, retriever models, first LM call).  Steady state is "
        "(rows - 1) / (last row - first row).  One llama_cpp.server process decodes one request at a time on 2 "
        "cores, so the LM bounds throughput; threads overlap retrieval, reranking, SPARQL and HTTP waits, and the "
        "per-question latency grows with the queue at the LM server.",
    ]
    if load["error_samples"]:
        lines += ["", "Error samples: " + "; ".join(e[:200] for e in load["error_samples"])]
    text = "\n".join(lines)
    print(text)
    out = REPO / "benchmarks" / "results" / "load.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"<!-- written by benchmarks/bench_load.py -->\ncommand: `python benchmarks/bench_load.py --n "
                   f"{args.n} --baseline-n {args.baseline_n} --threads {args.threads} --max-tokens {args.max_tokens}`"
                   f"\n\n{text}\n", encoding="utf-8")
    if lost or load["rows"] != args.n:
        raise SystemExit(f"{lost} results lost ({load['rows']} rows for {args.n} questions)")


if __name__ == "__main__":
    main()
