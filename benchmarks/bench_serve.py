"""Load test of `hqa serve` on loopback: N concurrent POST /v1/ask against one server, LM behind llama_cpp.server.

The LM is SmolLM2-135M-Instruct in one `python -m llama_cpp.server` process (OpenAI-compatible, LM cache off);
`hqa serve --program P --workers W --queue N` answers; N distinct questions (compmix/test) are sent at once from N
client threads.  Checks none is lost (N replies, each 200 with an answer) and reports p50/p95 latency and
requests/s, against the baseline of the CLI per question: `hqa ask --program P` in a fresh process for each of
`--baseline-n` questions (cold start included, as a user without a server pays it).

    python benchmarks/bench_serve.py [--n 100] [--baseline-n 5] [--program closedbook] [--workers 4]

Writes benchmarks/results/serve.md.  A benchmark, not a test: it takes minutes.

With ``--oversized N`` it measures instead the server's memory under hostile input: ``hqa serve`` with an API key,
then N concurrent requests each declaring a ``--claim-mb`` body and writing it as fast as the server takes it, once
without the key (401) and once with it (413); the server's resident memory (VmRSS) is sampled every 20 ms.  Writes
benchmarks/results/serve_oversized.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from standins.servers import stop, wait_http  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--baseline-n", type=int, default=5)
    ap.add_argument("--program", default="closedbook")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--oversized", type=int, default=0, help="measure memory under N concurrent oversized requests")
    ap.add_argument("--claim-mb", type=int, default=200, help="--oversized: the body size each request declares")
    ap.add_argument("--framing", default="declared", choices=["declared", "chunked", "smuggled"],
                    help="--oversized: how the bodies are framed (smuggled: Content-Length 10 + chunked)")
    args = ap.parse_args()
    if args.oversized:
        return oversized(args)

    import httpx

    from hqa.config import load_settings
    from hqa.data.datasets import load_dataset
    from hqa.lm.models import packaged_gguf
    from standins.servers import free_port

    def on_term(signum, frame):
        raise SystemExit(f"bench_serve: stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    settings = load_settings()
    questions = [r.question for r in load_dataset("compmix/test", limit=args.n)]
    lm_port, port = free_port(), free_port()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    base_env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO))
    servers = [subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host",
                                 "127.0.0.1", "--port", str(lm_port), "--n_ctx", str(args.n_ctx), "--model_alias",
                                 "smollm2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=base_env,
                                start_new_session=True)]
    env = dict(base_env, HQA_LM__PROVIDER="openai_compatible", HQA_LM__API_BASE=f"http://127.0.0.1:{lm_port}/v1",
               HQA_LM__MODEL="smollm2", HQA_LM__CACHE="false", HQA_LM__MAX_TOKENS=str(args.max_tokens),
               HQA_PATHS__ARTIFACTS=str(settings.artifacts_dir))
    try:
        wait_http(f"http://127.0.0.1:{lm_port}/v1/models", servers[0], seconds=180)
        # baseline: the CLI, a fresh process per question
        cli_s = []
        for q in questions[:args.baseline_n]:
            t = time.monotonic()
            subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", args.program, q], env=env,
                           check=True, capture_output=True)
            cli_s.append(time.monotonic() - t)
        print(f"CLI per question: {statistics.median(cli_s):.2f}s median over {len(cli_s)}", flush=True)

        t0 = time.monotonic()
        servers.append(subprocess.Popen([sys.executable, "-m", "hqa.cli", "serve", "--program", args.program,
                                         "--port", str(port), "--workers", str(args.workers), "--queue",
                                         str(args.n), "--timeout", "3600"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                        start_new_session=True))
        wait_http(f"http://127.0.0.1:{port}/healthz", servers[1], seconds=600)
        startup = time.monotonic() - t0
        results: list[tuple[int, float, str]] = [None] * len(questions)  # type: ignore[list-item]
        go = threading.Event()

        def client(i: int, q: str) -> None:
            go.wait()
            t = time.monotonic()
            try:
                r = httpx.post(f"http://127.0.0.1:{port}/v1/ask", json={"question": q}, timeout=3600)
                results[i] = (r.status_code, time.monotonic() - t, r.json().get("answer", r.text[:200]))
            except httpx.HTTPError as exc:
                results[i] = (0, time.monotonic() - t, f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=client, args=(i, q)) for i, q in enumerate(questions)]
        for th in threads:
            th.start()
        t1 = time.monotonic()
        go.set()
        for th in threads:
            th.join()
        wall = time.monotonic() - t1
        died = [name for name, p in zip(("llama_cpp.server", "hqa serve"), servers) if p.poll() is not None]
        if died:
            raise SystemExit(f"{', '.join(died)} exited during the run")
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
    finally:
        for p in reversed(servers):
            stop(p, grace=30)

    ok = [r for r in results if r and r[0] == 200 and str(r[2]).strip() != ""]
    lat = [r[1] for r in results if r]
    lost = len(questions) - len(ok)
    cli_med = statistics.median(cli_s)
    rps = len(ok) / wall
    lines = [
        "<!-- written by benchmarks/bench_serve.py -->",
        f"command: `python benchmarks/bench_serve.py --n {args.n} --baseline-n {args.baseline_n} --program "
        f"{args.program} --workers {args.workers} --max-tokens {args.max_tokens}`",
        "",
        f"# Load test: {args.n} concurrent POST /v1/ask to `hqa serve --program {args.program}` (llama_cpp.server behind)",
        "",
        f"Machine: {os.cpu_count()} CPU cores, {platform.machine()}, Python {platform.python_version()}; LM "
        f"SmolLM2-135M-Instruct Q4_1 in one llama_cpp.server process (n_ctx {args.n_ctx}, replies capped at "
        f"{args.max_tokens} tokens, LM cache off); questions: compmix/test, first {args.n}.",
        "",
        "| run | requests | ok (200 + answer) | lost | p50 s | p95 s | max s | wall s | requests/s |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| CLI, fresh process per question (baseline) | {len(cli_s)} | {len(cli_s)} | 0 | {cli_med:.2f} | "
        f"{pct(cli_s, 0.95):.2f} | {max(cli_s):.2f} | {sum(cli_s):.1f} | {1 / cli_med:.3f} |",
        f"| hqa serve, {args.n} at once, {args.workers} workers | {args.n} | {len(ok)} | {lost} | "
        f"{statistics.median(lat):.2f} | {pct(lat, 0.95):.2f} | {max(lat):.2f} | {wall:.1f} | {rps:.3f} |",
        "",
        f"Requests/s, server vs CLI per question: {rps * cli_med:.1f}x.  Server start-up (process launch to "
        f"/healthz ready): {startup:.1f}s, paid once.  Server counters after the run: served {health.get('served')}, "
        f"failed {health.get('failed')}.",
        "",
        "Latency is per request from the moment all requests are released, so it includes the wait for a worker "
        "and for the single llama_cpp.server process, which decodes one request at a time on 2 cores and bounds "
        "throughput; the CLI pays imports, program construction and the LM check on every question.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = REPO / "benchmarks" / "results" / "serve.md"
    out.write_text(text, encoding="utf-8")
    if lost:
        bad = [r for r in results if not r or r[0] != 200][:3]
        raise SystemExit(f"{lost} requests lost or failed, e.g. {json.dumps(bad)[:500]}")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hostile(port: int, key: str | None, claim: int, framing: str = "declared") -> tuple[int, int]:
    """One request of ``claim`` bytes written until the server stops taking them: (status, bytes the server accepted
    before replying / closing).  ``framing``: ``declared`` (a true Content-Length), ``chunked`` (no length), or
    ``smuggled`` (``Content-Length: 10`` with the body framed as chunked, the probe of issue 40)."""
    import socket

    length = {"declared": [f"Content-Length: {claim}"], "chunked": ["Transfer-Encoding: chunked"],
              "smuggled": ["Content-Length: 10", "Transfer-Encoding: chunked"]}[framing]
    head = [f"POST /v1/ask HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", *length] + (
        [f"Authorization: Bearer {key}"] if key else [])
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        chunk = b"x" * (1 << 20)
        if framing != "declared":
            chunk = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
        try:
            while sent < claim:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        try:
            reply = sock.recv(4096)
        except OSError:
            reply = b""
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0
    return status, sent


def oversized(args) -> None:
    import httpx

    from standins.servers import free_port

    port, key = free_port(), "bench-key"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO), HQA_API_KEY=key)
    proc = subprocess.Popen([sys.executable, "-m", "hqa.cli", "serve", "--program", "closedbook", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    rows = []
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, seconds=600)
        for label, k in (("no key (401)", None), ("with key (413)", key)):
            before = rss_mb(proc.pid)
            peak, done = before, threading.Event()

            def sample() -> None:
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, rss_mb(proc.pid))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            results: list = [None] * args.oversized
            def one(i: int, k: str | None = k) -> None:
                results[i] = hostile(port, k, args.claim_mb << 20, args.framing)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(args.oversized)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            done.set()
            sampler.join()
            after = rss_mb(proc.pid)
            statuses = sorted({r[0] for r in results})
            accepted = max(r[1] for r in results) / (1 << 20)
            rows.append(f"| {label} | {args.oversized} x {args.claim_mb} MB | {statuses} | {accepted:.0f} | "
                        f"{before:.0f} | {peak:.0f} | {after:.0f} |")
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
    finally:
        stop(proc, grace=30)
    flag = "" if args.framing == "declared" else f" --framing {args.framing}"
    lines = ["<!-- written by benchmarks/bench_serve.py --oversized -->",
             f"command: `python benchmarks/bench_serve.py --oversized {args.oversized} --claim-mb {args.claim_mb}"
             f"{flag}`", "",
             f"# Memory of `hqa serve --program closedbook` (API key set) under {args.oversized} concurrent "
             f"oversized requests ({args.framing} bodies)", "",
             "| requests | each declares | statuses | most MB a client wrote before the reply / close | "
             "server RSS before MB | peak MB | after MB |", "|---|---|---|---|---|---|---|", *rows, "",
             f"Server counters after: served {health.get('served')}, failed {health.get('failed')}.  "
             f"Machine: {os.cpu_count()} CPU cores, {platform.machine()}."]
    text = "\n".join(lines) + "\n"
    print(text)
    name = "serve_oversized.md" if args.framing == "declared" else f"serve_oversized_{args.framing}.md"
    (REPO / "benchmarks" / "results" / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
