"""Load test on loopback: N questions through `hqa evaluate --threads 8` against real servers.

The LM runs behind `python -m llama_cpp.server` (OpenAI-compatible), SPARQL goes to `oxigraph serve-read-only`
over the knowledge pack; the `simple` program (2 LM calls + retrieval per question), LM cache off.  Checks that no
result is lost (N rows, unique ids) and prints throughput and its ratio against `--threads 1` on a smaller run.

    python benchmarks/bench_load.py [--n 200] [--baseline-n 20] [--threads 8]

Writes benchmarks/results/load.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def run_eval(env: dict, n: int, threads: int, out: Path) -> tuple[float, list[dict]]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "evaluate", "--program", "simple", "--dataset",
                           "compmix/test", "--limit", str(n), "--threads", str(threads), "--out", str(out), "--fresh"],
                          capture_output=True, text=True, env=env, timeout=7200)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines() if line.strip()]
    return elapsed, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--baseline-n", type=int, default=20)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()

    from hqa.config import load_settings
    from hqa.lm import packaged_gguf
    from hqa.servers import free_port, start_oxigraph, wait_port

    settings = load_settings()
    lm_port, kg_port = free_port(), free_port()
    servers = [
        subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host",
                          "127.0.0.1", "--port", str(lm_port), "--n_ctx", "4096", "--model_alias", "smollm2"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    tmp = Path(tempfile.mkdtemp(prefix="hqa-load-"))
    try:
        wait_port(lm_port, servers[0])
        servers.append(start_oxigraph(settings.kg_path, kg_port)[0])
        env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
        env.update(HQA_LM__PROVIDER="openai_compatible", HQA_LM__API_BASE=f"http://127.0.0.1:{lm_port}/v1",
                   HQA_LM__MODEL="smollm2", HQA_LM__CACHE="false", HQA_KG__KIND="sparql",
                   HQA_KG__ENDPOINT=f"http://127.0.0.1:{kg_port}/query",
                   HQA_PATHS__ARTIFACTS=str(settings.artifacts_dir))
        base_s, base_rows = run_eval(env, args.baseline_n, 1, tmp / "base")
        load_s, rows = run_eval(env, args.n, args.threads, tmp / "load")
    finally:
        for p in servers:
            p.terminate()
            p.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    ids = [r["id"] for r in rows]
    lost = args.n - len(set(ids))
    errors = sum(1 for r in rows if r.get("error"))
    base_tp = len(base_rows) / base_s
    load_tp = len(rows) / load_s
    lines = [
        "# Load test: `hqa evaluate --program simple` against llama_cpp.server + oxigraph serve-read-only",
        "",
        "| run | questions | threads | wall s | questions/s | rows | unique ids | errors |",
        "|---|---|---|---|---|---|---|---|",
        f"| baseline | {args.baseline_n} | 1 | {base_s:.1f} | {base_tp:.3f} | {len(base_rows)} | "
        f"{len(set(r['id'] for r in base_rows))} | {sum(1 for r in base_rows if r.get('error'))} |",
        f"| load | {args.n} | {args.threads} | {load_s:.1f} | {load_tp:.3f} | {len(rows)} | {len(set(ids))} | {errors} |",
        "",
        f"throughput ratio (threads {args.threads} vs 1): {load_tp / base_tp:.2f}x; lost results: {lost}",
        "(one llama_cpp.server process answers one request at a time on 2 cores, so the LM bounds throughput; "
        "threads overlap retrieval, SPARQL and HTTP waits.)",
    ]
    text = "\n".join(lines)
    print(text)
    out = REPO / "benchmarks" / "results" / "load.md"
    out.write_text(f"<!-- written by benchmarks/bench_load.py -->\ncommand: `python benchmarks/bench_load.py --n "
                   f"{args.n} --baseline-n {args.baseline_n} --threads {args.threads}`\n\n{text}\n", encoding="utf-8")
    if lost:
        raise SystemExit(f"{lost} results lost")


if __name__ == "__main__":
    main()
