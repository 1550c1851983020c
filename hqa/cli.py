"""``hqa`` command line.

Every user-caused failure (``HQAError``) prints one line on stderr and exits 2; Ctrl-C exits 130.  Nothing is
written to artifacts/ except by atomic replace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hqa.errors import ConfigError, HQAError  # noqa: E402


def _settings(args: argparse.Namespace):
    from hqa.config import load_settings

    path = Path(args.config) if getattr(args, "config", None) else None
    if path is not None and not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    return load_settings(path, lm_provider=getattr(args, "lm", None), lm_model=getattr(args, "model", None),
                         lm_api_base=getattr(args, "api_base", None), kg_kind=getattr(args, "kg", None),
                         kg_endpoint=getattr(args, "endpoint", None))


# -- ask -------------------------------------------------------------------------------------------------------
def _format_trace(trace: dict[str, Any]) -> str:
    lines = []
    answers = trace.get("answers", {})
    lines.append(f"program: {trace.get('program')}")
    if answers.get("parametric") is not None:
        lines.append(f"parametric answer (LM memory): {answers['parametric']}")
    for key in ("text", "kg"):
        if answers.get(key):
            lines.append(f"{key} answer: {answers[key]}")
    if trace.get("entities"):
        lines.append("linked entities: " + ", ".join(f"{e['label']} ({e['id']})" for e in trace["entities"]))
    for q in trace.get("sparql", []):
        status = q.get("error") or f"{len(q.get('rows', []))} rows"
        lines.append(f"sparql [{status}]: " + " ".join(q.get("query", "").split())[:300])
        for row in q.get("rows", [])[:5]:
            lines.append("    " + json.dumps(row, ensure_ascii=False)[:200])
    for step in trace.get("tool_calls", []):
        lines.append(f"tool {step.get('tool')}({str(step.get('input'))[:80]}) -> {str(step.get('output'))[:120]}")
    if trace.get("evidence"):
        lines.append("evidence used (after rerank):")
        for ev in trace["evidence"]:
            meta = ev.get("meta", {})
            where = meta.get("title") or meta.get("id") or meta.get("s") or ""
            lines.append(f"  [{ev['source']}] {ev['text'][:160]}" + (f"  <- {where}" if where else ""))
    return "\n".join(lines)


def cmd_ask(args: argparse.Namespace) -> int:
    question = " ".join(args.question).strip()
    if not question:
        raise HQAError("empty question: pass the question as an argument, e.g. hqa ask \"Who directed Alien?\"")
    settings = _settings(args)
    from hqa.programs import NEEDS_TOOLBOX, build_program
    from hqa.runtime import configure_dspy, install_toolbox

    program = build_program(args.program)
    if args.program in NEEDS_TOOLBOX:
        install_toolbox(settings)
    if settings.lm.provider == "openai_compatible":
        from hqa.lm import check_server

        check_server(settings.lm.api_base)
    configure_dspy(settings)
    start = time.monotonic()
    pred = program(question=question)
    elapsed = time.monotonic() - start
    trace = getattr(pred, "trace", None) or {}
    if args.json:
        print(json.dumps({"question": question, "answer": pred.answer, "seconds": round(elapsed, 3), "trace": trace},
                         ensure_ascii=False, indent=2, default=str))
    else:
        print(f"Q: {question}")
        print(f"A: {pred.answer}")
        print()
        print(_format_trace(trace))
        print(f"({elapsed:.1f}s)")
    return 0


# -- config ----------------------------------------------------------------------------------------------------
def cmd_config(args: argparse.Namespace) -> int:
    from hqa import config as C

    if args.action == "path":
        print(C.config_path())
        return 0
    if args.action == "set":
        if len(args.rest) != 2:
            raise ConfigError("usage: hqa config set SECTION.KEY VALUE")
        path = C.set_value(args.rest[0], args.rest[1], Path(args.config) if args.config else None)
        print(f"{args.rest[0]} = {args.rest[1]} written to {path}")
        return 0
    settings = _settings(args)
    data = settings.as_dict()
    data["derived"] = {"artifacts_dir": str(settings.artifacts_dir), "kg_path": str(settings.kg_path),
                       "tracking_uri": settings.tracking_uri}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(C.dump_toml(data))
    return 0


# -- pack ------------------------------------------------------------------------------------------------------
def cmd_pack(args: argparse.Namespace) -> int:
    from hqa.data.pack import build_pack, read_manifest

    settings = _settings(args)
    dest = settings.pack_dir
    if args.action == "build":
        shared = Path(args.shared) if args.shared else (
            Path(settings.paths.shared_data) if settings.paths.shared_data else None)
        manifest = build_pack(dest, shared=shared, progress=not args.quiet)
        if not args.no_coverage:
            from hqa.config import write_atomic
            from hqa.data.coverage import coverage

            manifest["coverage"] = coverage(dest)
            write_atomic(dest / "manifest.json", json.dumps(manifest, indent=2) + "\n")
        print(f"knowledge pack {manifest['version']} written to {dest}")
    else:
        manifest = read_manifest(dest)
    print(json.dumps(manifest, indent=2))
    return 0


# -- parser ----------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from hqa.programs import PROGRAMS

    p = argparse.ArgumentParser(prog="hqa", description="Hybrid-source question answering with DSPy programs")
    p.add_argument("--config", help="TOML config file (default: $HQA_CONFIG or ./hqa.toml)")
    sub = p.add_subparsers(dest="command", required=True)

    ask = sub.add_parser("ask", help="answer one question and show the evidence trace")
    ask.add_argument("question", nargs="*", help="the question")
    ask.add_argument("--program", default="simple", choices=sorted(PROGRAMS), help="which program answers")
    ask.add_argument("--json", action="store_true", help="print answer and trace as JSON")
    ask.add_argument("--lm", choices=["local", "openai", "openai_compatible"], help="override lm.provider")
    ask.add_argument("--model", help="override lm.model")
    ask.add_argument("--api-base", dest="api_base", help="override lm.api_base")
    ask.add_argument("--kg", choices=["oxigraph", "sparql"], help="override kg.kind")
    ask.add_argument("--endpoint", help="override kg.endpoint (SPARQL HTTP endpoint)")
    ask.set_defaults(func=cmd_ask)

    cfg = sub.add_parser("config", help="show or change settings")
    cfg.add_argument("action", nargs="?", default="show", choices=["show", "set", "path"])
    cfg.add_argument("rest", nargs="*", help="for set: SECTION.KEY VALUE")
    cfg.add_argument("--json", action="store_true")
    cfg.set_defaults(func=cmd_config)

    pack = sub.add_parser("pack", help="build or inspect the offline knowledge pack")
    pack.add_argument("action", choices=["build", "stats"])
    pack.add_argument("--shared", help="recorded data folder (default: ../shared/data)")
    pack.add_argument("--quiet", action="store_true", help="no progress bar")
    pack.add_argument("--no-coverage", action="store_true", help="skip the benchmark coverage measurement")
    pack.set_defaults(func=cmd_pack)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HQAError as exc:
        print(f"hqa: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hqa: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
