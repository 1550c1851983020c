"""Your own LM server against the embedded engine: the same SmolLM2 GGUF in-process and behind a real
``python -m llama_cpp.server`` (docs/serving.md's recipe), per program, on the same questions (issue 53).

Arms, each an ``hqa evaluate --fresh`` of every program on the first ``--n`` questions of ``--dataset``, DSPy's LM
cache off:

* ``in-process``: the embedded engine (llama.cpp's grammar holds replies to the signature's schema);
* ``server, before``: what hqa sent a server before structured outputs — the chat adapter, with its JSON fallback in
  plain JSON mode, the schema dropped (``lm.adapter = chat``, ``lm.response_format = json_object``); hqa's adapters
  now refuse a JSON object in a text field, which the old code took as the answer's repr, so this arm counts those
  replies as the parse failures they were;
* ``server, after``: the default (``lm.response_format = auto``: the probe finds llama-cpp-python's own spelling),
  with the recipe's ``lm.extra_body = {"repeat_penalty": 1.0}`` (the server's default 1.1 differs from the
  embedded engine's 1.0).

Both server arms run the programs as the embedded model does (``programs.answer_mode = grounded``,
``programs.abstain = on``: their ``auto`` means free text and no abstention for a remote LM, which hqa cannot tell is
the same 135M model).

Printed per program and arm: parse failures per LM call, LM calls and seconds per question, the largest prompt of
any request (the server's own token count, read through a recording proxy: the context length a server needs).
The ratio lines compare ``after`` with ``in-process``: parse-failure rate (target: at most in-process's) and LM calls
per question (target: within 10%).

    python benchmarks/bench_lm_server.py [--n 3] [--programs closedbook,simple,sscot,detllm,humaniq] [--cache]
        [--arms in-process,before,after]

Writes the table to benchmarks/results/lm_server.md.  A benchmark, not a test: it takes a while.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from standins.servers import RecordingProxy, free_port, stop, wait_http  # noqa: E402

#: each program's arguments here (the suite's real-server test uses the same small settings)
PROGRAM_ARGS = {"closedbook": [], "simple": [], "sscot": ["--program-kwargs", '{"n_samples": 2}'],
                "detllm": ["--program-kwargs", '{"hops": 1}'], "humaniq": ["--program-kwargs", '{"max_iters": 2}']}


def evaluate(program: str, arm: str, env: dict, args, work: Path) -> dict:
    out = work / f"{program}-{arm.replace(' ', '_').replace(',', '')}"
    cmd = [sys.executable, "-m", "hqa.cli", "evaluate", "--program", program, *PROGRAM_ARGS[program],
           "--dataset", args.dataset, "--limit", str(args.n), "--no-estimate", "--fresh", "--out", str(out)]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=6 * 3600)
    if proc.returncode != 0:
        raise SystemExit(f"{program} / {arm} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    calls = sum(r["lm_calls"] for r in rows)
    return {"program": program, "arm": arm, "n": len(rows), "lm_calls": calls, "calls_per_q": calls / len(rows),
            "parse_failures": sum(r.get("parse_failures") or 0 for r in rows),
            "fallbacks": sum(1 for r in rows if r.get("fallback")),
            "seconds_per_q": sum(r["seconds"] for r in rows) / len(rows), "wall": time.monotonic() - start}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=3, help="questions per program and arm")
    p.add_argument("--dataset", default="compmix/test:answerable")
    p.add_argument("--programs", default=",".join(PROGRAM_ARGS))
    p.add_argument("--arms", default="in-process,before,after", help="which of the three arms to run")
    p.add_argument("--n-threads", type=int, default=2, help="llama_cpp.server --n_threads (its default is 1)")
    p.add_argument("--cache", action="store_true", help="llama_cpp.server --cache True (its RAM prompt cache)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "lm_server.md"))
    args = p.parse_args()
    wanted = {a.strip() for a in args.arms.split(",")}
    unknown = wanted - {"in-process", "before", "after"}
    if unknown:
        raise SystemExit(f"--arms: unknown {sorted(unknown)}; valid: in-process, before, after")
    from hqa.lm.models import packaged_gguf

    programs = [x for x in args.programs.split(",") if x]
    port = free_port()
    server_cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host", "127.0.0.1",
                  "--port", str(port), "--n_ctx", "8192", "--n_threads", str(args.n_threads), "--model_alias",
                  "smollm2"] + (["--cache", "True", "--cache_size", str(1 << 30)] if args.cache else [])
    base = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    base.update(PYTHONPATH=str(REPO), HQA_LM__CACHE="false", HQA_LM__TIMEOUT="1800",
                HQA_PATHS__ARTIFACTS=os.environ.get("HQA_PATHS__ARTIFACTS", str(REPO / "artifacts")))
    results = []
    with tempfile.TemporaryDirectory(prefix="hqa-lm-server-") as tmp:
        work = Path(tmp)
        base["HQA_TRACKING__URI"] = f"sqlite:///{work / 'mlflow.db'}"
        server = subprocess.Popen(server_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        proxy = None
        try:
            wait_http(f"http://127.0.0.1:{port}/v1/models", server)
            proxy = RecordingProxy(f"http://127.0.0.1:{port}").start()
            # the programs as the embedded model runs them (answer_mode and abstain are "auto": grounded and on for
            # the embedded LM, free and off for a remote one, which hqa cannot tell is the same 135M model)
            remote = {**base, "HQA_LM__PROVIDER": "openai_compatible", "HQA_LM__API_BASE": proxy.api_base,
                      "HQA_LM__MODEL": "smollm2", "HQA_PROGRAMS__ANSWER_MODE": "grounded",
                      "HQA_PROGRAMS__ABSTAIN": "on"}
            arms = {"in-process": base,
                    "server, before": {**remote, "HQA_LM__ADAPTER": "chat", "HQA_LM__RESPONSE_FORMAT": "json_object"},
                    "server, after": {**remote, "HQA_LM__EXTRA_BODY": json.dumps({"repeat_penalty": 1.0})}}
            arms = {k: v for k, v in arms.items() if k.split(", ")[-1] in wanted}
            for program in programs:
                for arm, env in arms.items():
                    seen = len(proxy.usages)
                    row = evaluate(program, arm, env, args, work)
                    prompts = [u.get("prompt_tokens") or 0 for u in proxy.usages[seen:]]
                    row["largest_prompt"] = max(prompts) if prompts else None
                    results.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            if proxy is not None:
                proxy.stop()
            stop(server)
    lines = ["# Your own LM server: SmolLM2-135M in-process and behind llama_cpp.server, per program", "",
             f"`python benchmarks/bench_lm_server.py --n {args.n} --programs {args.programs} --arms {args.arms}"
             + (" --cache" if args.cache else "") + f"`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{platform.machine()}, {os.cpu_count()} cores; dataset `{args.dataset}`; server: `llama_cpp.server "
             f"--n_ctx 8192 --n_threads {args.n_threads}" + (" --cache True" if args.cache else "") + "`.", "",
             "| program | arm | questions | LM calls / q | parse failures / call | fallbacks | s / q | largest prompt "
             "(tokens) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        rate = r["parse_failures"] / r["lm_calls"] if r["lm_calls"] else 0.0
        lines.append(f"| {r['program']} | {r['arm']} | {r['n']} | {r['calls_per_q']:.2f} | {rate:.3f} "
                     f"({r['parse_failures']}/{r['lm_calls']}) | {r['fallbacks']} | {r['seconds_per_q']:.1f} | "
                     f"{r['largest_prompt'] if r['largest_prompt'] is not None else '—'} |")
    lines += ["", "Ratios, server after vs in-process (parse-failure rate: target ≤ in-process; LM calls per question: "
              "target within 10%; seconds per question: measured, no target):", ""]
    for program in programs:
        by = {r["arm"]: r for r in results if r["program"] == program}
        local, after = by.get("in-process"), by.get("server, after")
        if not local or not after:
            continue
        lr = local["parse_failures"] / max(1, local["lm_calls"])
        ar = after["parse_failures"] / max(1, after["lm_calls"])
        lines.append(f"- {program}: parse failures per call {ar:.3f} vs {lr:.3f} ({'met' if ar <= lr else 'NOT met'}); "
                     f"LM calls per question {after['calls_per_q']:.2f} vs {local['calls_per_q']:.2f} "
                     f"(ratio {after['calls_per_q'] / max(local['calls_per_q'], 1e-9):.2f}); seconds per question "
                     f"{after['seconds_per_q']:.1f} vs {local['seconds_per_q']:.1f} "
                     f"(ratio {after['seconds_per_q'] / max(local['seconds_per_q'], 1e-9):.2f})")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
