"""Live-source cost per question: HTTP requests and bytes per program, and latency with a cold vs a warm cache.

All six programs run in live mode (``text.kind = wikipedia``, ``linker.kind = wikidata``, ``kg.kind = sparql``)
against the loopback stand-ins of :mod:`standins.live` (MediaWiki + Wikibase formats over the knowledge pack) and a
real ``oxigraph serve-read-only`` over the pack's store.  The LM is scripted (the test suite's demo-sensitive LM: the
agent searches Wikipedia for the question, links its first named mention, then finishes; DETLLM's hop query is the
question), so the numbers measure the retrieval and HTTP path, not an LM.

* cold: ``http.cache_mode = record`` on an empty cache — every request goes to the network;
* warm: ``http.cache_mode = live`` on the cache the cold run filled — every request is a cache hit.

Baseline for the ratio: the cold run.  ``python benchmarks/bench_live.py [--n 10] [--dataset humaniq-compmix]``;
writes benchmarks/results/live.md.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the test kits: lmkit's ScriptLM, conftest's reranker

PROGRAMS = ["humaniq", "static", "latefusion", "detllm", "sscot", "simple"]


def mention(question: str) -> str:
    spans = re.findall(r"(?:[A-Z][\w'-]+(?:\s+(?:of|the|de)\s+|\s+)?)+", question[1:])
    return (max(spans, key=len).strip() if spans else question)[:80]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--dataset", default="humaniq-compmix")
    args = ap.parse_args()

    import dspy
    from conftest import KeepOrderReranker
    from lmkit import ScriptLM

    from hqa.config import load_settings
    from hqa.data.datasets import load_dataset
    from hqa.programs import build_program
    from hqa.toolbox import Toolbox
    from standins.servers import start_oxigraph
    from standins.live import serve

    base_settings = load_settings()
    pack = base_settings.pack_dir
    questions = [ex.question for ex in load_dataset(args.dataset, limit=args.n)]
    work = Path(tempfile.mkdtemp(prefix="hqa-bench-live-"))
    shutil.copytree(pack / "kg", work / "kg")
    oxigraph, sparql_url = start_oxigraph(work / "kg")
    server, base = serve(pack, sparql_url)

    class QuestionLM(ScriptLM):
        def set_question(self, q: str) -> None:
            m = mention(q)
            self.script = [("WikiSearch", q), ("GetWikidataID", m), ("Finish", "Wikipedia_Answer: None, "
                                                                               "Wikidata_Answer: None")]
            self.fixed.update(search_query=q, query_entity=m, sparql="None", chain=f"({m}, answer, #1)")

        def reply(self, messages):
            system = next((m["content"] for m in messages if m.get("role") == "system"), "")
            if "next_tool_name" in system:
                tool, arg = self.script[min(self.step, len(self.script) - 1)]
                self.step = 0 if tool == "Finish" else self.step + 1
                self.fixed.update(next_tool_name=tool, next_tool_args=arg)
                return super(ScriptLM, self).reply(messages)
            return super(ScriptLM, self).reply(messages)

    def run(name: str, mode: str, cache: Path) -> dict:
        settings = load_settings(
            text_kind="wikipedia", text_endpoint=base + "/w/api.php", linker_kind="wikidata",
            linker_endpoint=base + "/wikidata/api.php", kg_kind="sparql", kg_endpoint=base + "/sparql",
            http_cache_mode=mode, http_cache_path=str(cache))
        tb = Toolbox(settings, reranker=KeepOrderReranker())
        program = build_program(name, tb)
        lm = QuestionLM()
        times = []
        for q in questions:
            lm.reset()
            lm.set_question(q)
            t0 = time.perf_counter()
            with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
                program(question=q)
            times.append(time.perf_counter() - t0)
        built = tb.built()  # only the clients the run used (asking for another would build it)
        clients = [tb.http if "http" in built else None,
                   getattr(tb.sparql, "client", None) if "sparql" in built else None]
        clients = [c for c in clients if c is not None]
        return {"p50": statistics.median(times), "requests": sum(c.network_requests for c in clients),
                "bytes": sum(c.network_bytes for c in clients), "hits": sum(c.cache_hits for c in clients)}

    rows = []
    try:
        for name in PROGRAMS:
            cache = work / f"{name}.sqlite"
            run(name, "record", work / "warmup.sqlite")  # loads the embedder etc. once, outside the timings
            cold = run(name, "record", cache)
            warm = run(name, "live", cache)
            rows.append((name, cold, warm))
            print(f"{name:10s} req/q {cold['requests'] / len(questions):5.1f}  KB/q {cold['bytes'] / 1024 / len(questions):7.1f}"
                  f"  cold p50 {cold['p50'] * 1000:7.1f} ms  warm p50 {warm['p50'] * 1000:7.1f} ms"
                  f"  warm/cold {warm['p50'] / cold['p50']:.2f}  warm network requests {warm['requests']}", flush=True)
    finally:
        server.shutdown()
        oxigraph.kill()
        shutil.rmtree(work, ignore_errors=True)

    out = REPO / "benchmarks" / "results" / "live.md"
    lines = [f"# Live sources over loopback stand-ins: {len(questions)} questions of {args.dataset}", "",
             "`python benchmarks/bench_live.py --n %d --dataset %s`; scripted LM, so this is the retrieval + HTTP path."
             % (args.n, args.dataset), "",
             "| program | requests / question | KB / question | cold p50 ms | warm p50 ms | warm / cold | warm requests |",
             "|---|---|---|---|---|---|---|"]
    for name, cold, warm in rows:
        lines.append(f"| {name} | {cold['requests'] / len(questions):.1f} | {cold['bytes'] / 1024 / len(questions):.1f} | "
                     f"{cold['p50'] * 1000:.1f} | {warm['p50'] * 1000:.1f} | {warm['p50'] / cold['p50']:.2f} | "
                     f"{warm['requests']} |")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
