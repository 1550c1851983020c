"""LM-bound throughput of hqa's evaluator against a loopback OpenAI-compatible LM with a fixed latency per call.

The LM is :mod:`standins.openai_lm` in its own process (``python -m standins.openai_lm``): every call waits
``--latency`` seconds and answers each hqa signature validly (the HumanIQ agent runs WikiSearch → GetWikidataID →
GenerateSparql → RunSparql → Finish), so a run is bound by LM latency as against a remote provider, and the stand-in's
own CPU is not counted in hqa's.  For each program and concurrency ``c`` (hqa.jobs.evaluate's question threads, the path
``hqa evaluate``/``hqa compare`` take), ``c × --waves`` questions of a fixed set (compmix/test in order; each level
takes the questions after the previous level's, so none re-asks a question an earlier level warmed the retrieval
memos for) run through :func:`hqa.jobs.evaluate.evaluate` and it prints:

* questions/s against the ideal LM-bound rate ``c / (LM calls per question × latency)``, and their ratio —
  ``humaniq @16 efficiency 0.93``;
* hqa's own CPU seconds per question (user + system time of this process — retrieval, DPP, parsing, the HTTP
  client — and of the SPARQL store's worker processes, also given alone), the stand-in's CPU per LM call, and the
  cores both kept busy (their CPU seconds ÷ wall time: on this shared 2-core machine the rest belongs to other
  work), with the load average when the level started;
* p50 / p95 question latency; the process's peak RSS; LM calls, prompt / cached prompt / completion tokens per
  question as the stand-in counted them (its token count is approximate: words and punctuation marks).

* the *true limit* of the machine — the smaller of the LM-bound ideal and cores ÷ (hqa CPU per question), both
  printed — and the throughput divided by it (``vs limit``): a run that keeps every core busy with hqa's own work
  reaches 1.0 even where the LM-bound ideal is out of reach.

``--engine ray --workers N`` answers through :class:`hqa.jobs.ray_engine.RayEngine` instead (N actors of a local
Ray, each opening the program once; the level's questions in flight across them): hqa's CPU is then this process's
(the driver: rows, dispatch) plus every worker's (their ``usage()``: their own and their SPARQL workers').

Targets (issue 38): efficiency ≥ 0.9 at 16 and ≥ 0.8 at 64 concurrent questions with 300 ms per call; (issue 55)
throughput ÷ the true limit ≥ 0.85 at 64 and 256.

    python benchmarks/bench_throughput.py [--quick] [--programs humaniq,detllm,sscot,simple]
                                          [--levels 1,4,16,64] [--latency 0.3] [--waves 6] [--out FILE]
                                          [--engine threads|ray] [--workers N]

A level starts its c questions at once, so their first steps queue for the CPU together; a run pays that once, so
the more waves, the closer a run comes to what a long ``hqa evaluate`` sustains (6 by default: docs/benchmarks.md
compares 3 and 6).  ``--quick``: one wave per level and fewer levels' questions (under 10 minutes here).  Needs a
built pack (artifacts/pack).  Writes benchmarks/results/throughput.md (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from standins.servers import free_port, wait_port  # noqa: E402

from hqa.io.cpu import own_cpu_seconds as cpu_seconds, process_cpu_seconds, tree_cpu_seconds  # noqa: E402

TARGETS = {16: 0.9, 64: 0.8}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else 0.0


def admin(base: str, path: str, post: bool = False) -> dict:
    req = urllib.request.Request(base + path, data=b"{}" if post else None, method="POST" if post else "GET",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


class Workers:
    """CPU seconds of hqa's work outside this process: the SPARQL store's worker processes (hqa.retrievers.sparql.pool,
    children of this process but the LM stand-in ``exclude``) with the threads engine; with Ray, every worker actor
    (its own and its SPARQL workers', :meth:`hqa.jobs.ray_engine.Worker.usage`).  :meth:`ray_own`: Ray's own
    processes (raylet, GCS, dashboard agent: the children of this process a local Ray started; the workers are
    their children), reported apart — Ray's cost, not hqa's."""

    def __init__(self, exclude: int, engine=None):
        self.exclude, self.engine = exclude, engine

    def seconds(self) -> float:
        if self.engine is None:
            return tree_cpu_seconds(exclude=(self.exclude,), own=False)
        return sum(self.engine.collect_usage().values())

    def ray_own(self) -> float:
        return 0.0 if self.engine is None else tree_cpu_seconds(exclude=(self.exclude,), own=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default="humaniq,detllm,sscot,simple")
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument("--waves", type=int, default=6, help="questions per level = concurrency x waves")
    ap.add_argument("--dataset", default="compmix/test")
    ap.add_argument("--quick", action="store_true", help="one wave per level")
    ap.add_argument("--engine", choices=["threads", "ray"], default="threads")
    ap.add_argument("--workers", type=int, default=None, help="with --engine ray: Ray workers (default: the cores)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "throughput.md"))
    args = ap.parse_args()
    waves = 1 if args.quick else args.waves
    levels = [int(x) for x in args.levels.split(",")]
    programs = [p for p in args.programs.split(",") if p]

    from hqa.app import open_program
    from hqa.config import load_settings
    from hqa.data.datasets import load_examples
    from hqa.jobs.evaluate import evaluate
    from hqa.toolbox import Toolbox

    # a SIGTERM (e.g. `timeout`) ends this process through the finally below, which stops the LM stand-in
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "standins.openai_lm", "--port", str(port), "--latency",
                               str(args.latency)], cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines, results, stored_texts = [], [], 0
    try:
        wait_port(port, server, seconds=60)
        base = f"http://127.0.0.1:{port}"
        settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                                 lm_api_base=base + "/v1", lm_model="standin", lm_cache=False, lm_num_retries=0,
                                 paths_artifacts=str(REPO / "artifacts"), programs_answer_mode="free")
        # the world texts' vectors scripts/setup stores (hqa.retrievers.embedding.stored), as the programs' toolboxes
        # load them: without them every hop embeds its triples and entity descriptions at question time, and the
        # table says so
        stored = Toolbox(settings).vector_memo.stored
        stored_texts = len(stored) if stored is not None else 0
        print(f"stored vectors of the pack's texts: {stored_texts}", flush=True)
        # each level asks questions no earlier level asked: the retrieval memos (hqa.retrievers.embedding.memo) and
        # caches then serve what they would in one long run over distinct questions, not a rerun of the same ones
        needed = sum(levels) * waves + 4  # the levels' questions and the 4 that warm each program
        examples = load_examples(args.dataset, limit=needed)
        if len(examples) < needed:
            raise SystemExit(f"{args.dataset} has {len(examples)} questions; these levels and waves need {needed}")
        cores = os.cpu_count() or 1
        for name in programs:
            opened = open_program(settings, program=name)
            engine, spec = None, None
            if args.engine == "ray":
                from hqa.jobs.engine import ProgramSpec
                from hqa.jobs.ray_engine import RayEngine

                engine = RayEngine(workers=args.workers, threads=max(levels))
                engine.start()  # the actors now, each answering up to the largest level's share at once
                spec = ProgramSpec.of(settings, program=name)
            workers = Workers(server.pid, engine)
            # warm: indexes, embedders, the tools' first uses, HTTP client (questions outside the measured set)
            if engine is not None:
                engine.threads = 2 * (args.workers or cores)
            evaluate(opened.program, examples[-4 * (args.workers or 1):], threads=2, engine=engine, spec=spec)
            start = 0
            for c in levels:
                n = c * waves
                asked, start = examples[start:start + n], start + n
                if engine is not None:
                    engine.threads = c
                admin(base, "/admin/reset", post=True)
                load = os.getloadavg()[0]
                cpu0, lm_cpu0, t0 = cpu_seconds(), process_cpu_seconds(server.pid), time.perf_counter()
                workers_cpu0, ray_cpu0 = workers.seconds(), workers.ray_own()
                summary = evaluate(opened.program, asked, threads=c, engine=engine, spec=spec)
                wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
                workers_cpu, ray_cpu = workers.seconds() - workers_cpu0, workers.ray_own() - ray_cpu0
                lm_cpu = process_cpu_seconds(server.pid) - lm_cpu0
                stats = admin(base, "/admin/stats")
                calls = stats["calls"] / n
                qps = n / wall
                ideal = c / (calls * args.latency) if calls else float("inf")
                eff = qps / ideal if calls else float("nan")
                cpu_per_q = (cpu + workers_cpu) / n
                cpu_bound = cores / cpu_per_q if cpu_per_q else float("inf")
                limit = min(ideal, cpu_bound)
                secs = [r["seconds"] for r in summary.rows]
                rec = {"program": name, "c": c, "n": n, "qps": qps, "ideal": ideal, "efficiency": eff,
                       "cpu_bound": cpu_bound, "limit": limit, "vs_limit": qps / limit,
                       "engine": args.engine + (f"×{engine.workers}" if engine is not None else ""),
                       "cpu_per_q": cpu_per_q, "workers_cpu_per_q": workers_cpu / n, "ray_cpu_per_q": ray_cpu / n,
                       "p50": pct(secs, 0.5), "p95": pct(secs, 0.95),
                       "calls_per_q": calls, "prompt_per_q": stats["prompt_tokens"] / n,
                       "cached_per_q": stats["cached_tokens"] / n,
                       "completion_per_q": stats["completion_tokens"] / n, "errors": summary.errors,
                       "max_in_flight": stats["max_in_flight"], "load": load,
                       "lm_cpu_per_call": lm_cpu / stats["calls"] if stats["calls"] else 0.0,
                       "cpu_share": (cpu + workers_cpu + ray_cpu + lm_cpu) / wall,
                       "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
                results.append(rec)
                line = (f"{name} @{c} [{rec['engine']}] efficiency {eff:.2f}, vs limit {rec['vs_limit']:.2f}  "
                        f"({qps:.2f} q/s vs ideal {ideal:.2f} and {cores} cores ÷ CPU/q {cpu_bound:.2f}; "
                        f"{calls:.1f} calls/q; hqa CPU {rec['cpu_per_q']:.3f} s/q "
                        f"(outside this process {rec['workers_cpu_per_q']:.3f}; Ray's own "
                        f"{rec['ray_cpu_per_q']:.3f}); stand-in CPU "
                        f"{rec['lm_cpu_per_call'] * 1000:.1f} ms/call; cores busy {rec['cpu_share']:.2f}; "
                        f"load {load:.1f}; p50 {rec['p50']:.2f} s "
                        f"p95 {rec['p95']:.2f} s; peak RSS {rec['peak_rss_mb']:.0f} MB; errors {summary.errors})")
                print(line, flush=True)
                lines.append(line)
            if engine is not None:
                engine.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    write(Path(args.out), args, results, waves, stored_texts)


def write(out: Path, args, results: list[dict], waves: int, stored_texts: int) -> None:
    cmd = "python benchmarks/bench_throughput.py " + " ".join(a for a in sys.argv[1:])
    load = os.getloadavg()
    rows = ["| program | engine | concurrent | questions | q/s | ideal q/s | efficiency | target | cores ÷ CPU/q "
            "| vs true limit | hqa CPU s/q | of it outside this process s/q | Ray's own CPU s/q | stand-in CPU ms/call "
            "| cores busy (hqa + Ray + stand-in) | load at start | p50 s "
            "| p95 s | LM calls/q | prompt tok/q | cached tok/q | completion tok/q | peak RSS MB | errors |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        target = TARGETS.get(r["c"])
        rows.append(f"| {r['program']} | {r['engine']} | {r['c']} | {r['n']} | {r['qps']:.2f} | {r['ideal']:.2f} | "
                    f"{r['efficiency']:.2f} | {'≥ ' + format(target, '.1f') if target else ''} | "
                    f"{r['cpu_bound']:.2f} | {r['vs_limit']:.2f} | "
                    f"{r['cpu_per_q']:.3f} | {r['workers_cpu_per_q']:.3f} | {r['ray_cpu_per_q']:.3f} | "
                    f"{r['lm_cpu_per_call'] * 1000:.1f} | "
                    f"{r['cpu_share']:.2f} | {r['load']:.1f} | "
                    f"{r['p50']:.2f} | {r['p95']:.2f} | {r['calls_per_q']:.1f} | "
                    f"{r['prompt_per_q']:.0f} | {r['cached_per_q']:.0f} | {r['completion_per_q']:.0f} | "
                    f"{r['peak_rss_mb']:.0f} | {r['errors']} |")
    text = (f"# LM-bound throughput (benchmarks/bench_throughput.py)\n\n`{cmd.strip()}` — {args.latency * 1000:.0f} ms "
            f"per LM call (standins/openai_lm.py), {waves} wave(s) of questions per level from {args.dataset}; "
            f"{platform.node()}, {os.cpu_count()} cores, load average at the end {load[0]:.1f}; stored vectors of "
            f"the pack's texts: {stored_texts} (scripts/setup; 0: embedded at question time).\n\n"
            + "\n".join(rows) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
