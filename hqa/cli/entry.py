"""``hqa`` command line.

Every user-caused failure (``HQAError``) prints one line on stderr and exits 2; Ctrl-C exits 130; any other
exception prints one line naming a log file with its traceback and exits 1 (``--debug`` shows the traceback).  Nothing is
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
def _format_trace(trace: dict[str, Any], demos: dict[str, list[str]] | None = None) -> str:
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
    for name, ids in (demos or {}).items():
        lines.append(f"demos of {name}: " + ", ".join(ids))
    return "\n".join(escape_controls(line) for line in lines)


# C0 and C1 controls, DEL, and the bidirectional marks/overrides/isolates that reorder what a terminal shows
_CONTROLS = "[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"


def escape_controls(text: Any) -> str:
    """``text`` for a terminal: every control character written as its escape (``\\x1b``, ``\\n``,
    ``\\u202e``), so an answer or a passage cannot move the cursor, recolour the screen or forge output lines."""
    import re

    return re.sub(_CONTROLS, lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def repair_text(text: str) -> str:
    """Argument text with the bytes that were not UTF-8 (which Python hands over as lone surrogates) as U+FFFD."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # surrogates that did not come from undecodable bytes
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")


def cmd_ask(args: argparse.Namespace) -> int:
    # argv bytes that are not UTF-8 arrive as lone surrogates: repair them to U+FFFD instead of failing later
    question = repair_text(" ".join(args.question)).strip()
    if not question:
        raise HQAError("empty question: pass the question as an argument, e.g. hqa ask \"Who directed Alien?\"")
    from hqa.errors import question_too_long  # the limit hqa serve applies to a question

    too_long = question_too_long(question)
    if too_long:
        raise HQAError(too_long)
    settings = _settings(args)
    from hqa.app import prefetch

    opened = _open(args, settings)
    if args.trace or settings.tracking.traces:  # the question an MLflow trace (LM and tool calls as spans)
        from hqa.tracking.runs import enable_traces

        enable_traces(settings, opened)
    program = opened.program
    warming = prefetch(opened)  # the toolbox loads while the first LM call runs
    import dspy

    from hqa.lm.calls import DemoRecorder

    demos = DemoRecorder(program)  # the demos each predictor's prompts held for this question
    start = time.monotonic()
    with dspy.context(callbacks=demos.installed()):
        pred = program(question=question)
    elapsed = time.monotonic() - start
    warming.join()
    trace = getattr(pred, "trace", None) or {}
    from hqa.answering.presentation import abstention_lines, candidate_lines, prediction_fields

    fields = prediction_fields(pred)
    if args.json:
        print(json.dumps({"question": question, **fields, "demos": demos.used, "seconds": round(elapsed, 3),
                          "trace": trace}, ensure_ascii=False, indent=2, default=str))
    else:
        print(f"Q: {escape_controls(question)}")
        # each line escaped on its own: the line breaks are hqa's, the text in them is not
        lines = abstention_lines(pred, settings.world.path or "the knowledge pack") or [
            f"A: {fields['answer']}", *candidate_lines(fields["candidates"])]
        for line in lines:
            print(escape_controls(line))
        print()
        print(_format_trace(trace, demos.used))
        print(f"({elapsed:.1f}s)")
    _FAST_EXIT.append(True)  # the answer is out and nothing is left running: the process may end at once
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
    if args.action == "reset":
        if len(args.rest) > 1:
            raise ConfigError("usage: hqa config reset [SECTION.KEY]")
        path, backup = C.reset_value(args.rest[0] if args.rest else None, Path(args.config) if args.config else None)
        print(f"{args.rest[0]} reset to its default in {path}" if args.rest else
              f"{path} reset" + (f" (previous contents in {backup})" if backup else ""))
        return 0
    settings = _settings(args)
    data = settings.as_dict()
    data["derived"] = {"artifacts_dir": str(settings.artifacts_dir), "kg_path": str(settings.kg_path),
                       "world_dir": str(settings.world_dir or settings.pack_dir),
                       "tracking_uri": settings.tracking_uri}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(C.dump_toml(data))
    return 0


# -- pack ------------------------------------------------------------------------------------------------------
def cmd_pack(args: argparse.Namespace) -> int:
    from hqa.data.pack_manifest import read_manifest
    from hqa.world.pack import build_pack

    settings = _settings(args)
    dest = settings.pack_dir
    if args.action == "build":
        shared = Path(args.shared) if args.shared else None
        manifest = build_pack(dest, shared=shared, progress=not args.quiet, coverage=not args.no_coverage,
                              **({"leads": None} if args.no_leads else {}))
        print(f"knowledge pack {manifest['version']} written to {dest}")
    else:
        manifest = read_manifest(dest)
    print(json.dumps(manifest, indent=2))
    return 0


# -- data ----------------------------------------------------------------------------------------------------------
def cmd_data(args: argparse.Namespace) -> int:
    """``hqa data list`` / ``hqa data pull [NAME…|all|demo]`` (hqa/data/store.py)."""
    from hqa.data import store

    settings = _settings(args)
    root, base = store.data_dir(settings), store.mirror(settings)
    known = store.datasets()
    if args.action == "list":
        rows = []
        for ds in known.values():
            states = [store.file_status(f, root, verify=args.verify) for f in ds.files]
            present = sum(s != "missing" for s in states)
            pinned = sum(f.sha256 is not None for f in ds.files)
            sha = ("WRONG" if "WRONG" in states else f"{pinned}/{len(ds.files)} pinned" if pinned else
                   "recorded on first download" if not any(s.startswith("ok") for s in states) else "recorded")
            rows.append({"name": ds.name, "origin": ds.origin, "paths": [f.path for f in ds.files],
                         "license": ds.license, "size": ds.size, "files": len(ds.files), "present": present,
                         "sha256": sha, "what": ds.what})
        if args.json:
            print(json.dumps({"data_dir": str(root), "mirror": base, "datasets": rows}, indent=2))
            return 0
        print(f"data directory: {root}" + (f"   mirror: {base}" if base else "   mirror: none"))
        print(f"{'dataset':<25} {'present':>7} {'size':>8}  {'sha256':<27} origin repository @ commit: path  [license]")
        for r in rows:
            size = (f"{r['size'] / 1e6:.1f} MB" if r["size"] >= 1e5 else f"{r['size'] / 1e3:.0f} kB") if r["size"] else "?"
            path = (r["paths"][0] or "-") if len(r["paths"]) == 1 else f"{r['files']} files ({r['paths'][0]} …)"
            print(f"{r['name']:<25} {str(r['present']) + '/' + str(r['files']):>7} {size:>8}  {r['sha256']:<27} "
                  f"{r['origin']}: {path}  [{r['license']}]")
        return 0
    names = args.names or ["all"]
    if "all" in names:
        names = list(known)
    elif "demo" in names:
        names = [n for n in names if n != "demo"] + store.pack_inputs()
    for name in names:
        store.dataset(name)  # an unknown name fails before anything is fetched
    got: dict[str, str] = {}
    failed = []
    for name in names:  # one dataset that cannot be fetched does not stop the others
        try:
            got.update(store.pull([name], progress=not args.quiet and sys.stderr.isatty(), settings=settings))
        except HQAError as exc:
            failed.append(name)
            print(f"hqa: error: {exc}", file=sys.stderr)
    print(f"{len(names) - len(failed)} dataset(s), {len(got)} file(s) in {root}: "
          f"{sum(v == 'present' for v in got.values())} already present and checked, "
          f"{sum(v == 'mirror' for v in got.values())} from the mirror, {sum(v == 'origin' for v in got.values())} "
          f"from their origin" + (f"; not fetched: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


# -- world ---------------------------------------------------------------------------------------------------------
def _world_dir(settings, ref: str) -> Path:
    """A world given by name (``<artifacts>/worlds/NAME``) or by folder."""
    from hqa.world.build import worlds_dir
    from hqa.retrievers.world_manifest import check_name

    if "/" in ref or ref.startswith((".", "~")) or Path(ref).is_dir() and (Path(ref) / "world.json").exists():
        return Path(ref).expanduser().resolve()
    return worlds_dir(settings.artifacts_dir) / check_name(ref)


def _virtuoso_target(args: argparse.Namespace):
    from hqa.world.virtuoso import VirtuosoTarget

    if args.kg_engine != "virtuoso":
        return None
    if not args.virtuoso_endpoint or not args.virtuoso_load_dir:
        raise ConfigError("--kg-engine virtuoso needs --virtuoso-endpoint URL and --virtuoso-load-dir DIR (a folder "
                          "in the server's DirsAllowed)")
    password = os.environ.get(args.virtuoso_password_env, "dba")
    return VirtuosoTarget(endpoint=args.virtuoso_endpoint, load_dir=Path(args.virtuoso_load_dir).resolve(),
                          isql=args.virtuoso_isql, user=args.virtuoso_user, password=password,
                          graph=args.virtuoso_graph or "")


def cmd_world(args: argparse.Namespace) -> int:
    from hqa.errors import WorldError
    from hqa.world import build as B
    from hqa.retrievers.world_manifest import open_world

    settings = _settings(args)
    if args.action == "list":
        rows = B.list_worlds(settings.artifacts_dir)
        current = settings.world_dir
        if args.json:
            print(json.dumps({"configured": str(current) if current else None, "worlds": rows}, indent=2))
            return 0
        print(f"configured world: {current or f'the knowledge pack ({settings.pack_dir})'}")
        for row in rows:
            mark = "*" if current is not None and Path(row["path"]) == current else " "
            if row["state"] != "complete":
                print(f"{mark} {row['name']:<20} {row['state']}: {row['error']}")
                continue
            parts = [f"kg={row['kg']}" + (f" ({row['triples']:,} triples)" if row.get("triples") else "")
                     if row.get("kg") else "no kg",
                     _labels_part(row),
                     f"{row['passages']:,} passages ({row['text_engine']})" if row.get("passages") else "no text"]
            print(f"{mark} {row['name']:<20} {', '.join(parts)}  {row['path']}")
        if not rows:
            print(f"no worlds under {B.worlds_dir(settings.artifacts_dir)} (build one: hqa world build NAME ...)")
        return 0
    if not args.ref:
        raise ConfigError(f"usage: hqa world {args.action} NAME" + ("|DIR" if args.action != "remove" else ""))
    if args.action == "build":
        return _world_build(args, settings)
    if args.action == "remove":
        from hqa.retrievers.world_manifest import check_name

        world = B.worlds_dir(settings.artifacts_dir) / check_name(args.ref)
        if settings.world_dir is not None and world == settings.world_dir:
            raise WorldError(f"world {args.ref} is the configured world; switch away first (hqa config reset "
                             "world.path)")
        print(f"world {args.ref}: {B.remove_world(world)}")
        return 0
    world = _world_dir(settings, args.ref)
    opened = open_world(world)
    if args.action == "show":
        print(json.dumps(opened.manifest, indent=2))
        return 0
    from hqa import config as C
    from hqa.retrievers.embedding.memo import embedder_key

    inside = B.worlds_dir(settings.artifacts_dir)
    value = opened.path.name if opened.path.parent == inside.resolve() else str(opened.path)
    pairs = {"world.path": value}
    # the query side (linker similarity, reranker, answer ranking) embeds with what the world's passages were
    # embedded with: the reranker then reuses the stored vectors of the passages it scores and the question is
    # embedded once per hop
    world_embedder = opened.passage_embedder
    if world_embedder and embedder_key(world_embedder) != embedder_key(settings.models.embedder):
        pairs["models.embedder"] = world_embedder
    path = C.set_values(pairs, Path(args.config) if args.config else C.config_path())
    print(f"world.path = {value} written to {path}: the programs now use world {opened.name} ({opened.path})")
    if "models.embedder" in pairs:
        print(f"models.embedder = {world_embedder} written too: the embedder of the world's passages "
              f"(was {settings.models.embedder})")
    return 0


def _labels_part(row: dict) -> str:
    """``hqa world list``'s label count: the manifest's labelled entities, not every entity the store holds."""
    if not row.get("entities"):
        return "no labels"
    labelled = row.get("labelled")
    if labelled is None or labelled == row["entities"]:
        return f"{row['entities']:,} labelled entities"
    return f"{labelled:,} labelled entities (of {row['entities']:,})"


def _world_build(args: argparse.Namespace, settings) -> int:
    from hqa.world.build import BuildOptions, build_world
    from hqa.retrievers.world_manifest import check_name
    from hqa.world.dumps import FORMATS, parse_properties, parse_source

    name = check_name(args.ref)
    dest = Path(args.out).expanduser().absolute() if args.out else _world_dir(settings, name)  # a link stays a link
    passage_formats = ("dpr-tsv", "kilt", "jsonl")
    opts = BuildOptions(
        passages=[parse_source(a, passage_formats) for a in args.passages or []],
        wikidata=[parse_source(a, FORMATS) for a in args.wikidata or []],
        entities_file=Path(args.entities) if args.entities else None,
        properties=parse_properties(args.properties) if args.properties else None,
        language=args.language, kg_engine=args.kg_engine, kg_endpoint=args.kg_endpoint or "",
        virtuoso=_virtuoso_target(args), embedder=args.embedder, dense_engine=args.dense_engine,
        dense_uri=args.dense_uri, chunk_triples=args.chunk_triples)
    log = (lambda m: None) if args.quiet else (lambda m: print(f"hqa: {m}", file=sys.stderr, flush=True))
    start = time.monotonic()
    manifest = build_world(dest, name, opts, fresh=args.fresh, force=args.force, progress=not args.quiet, log=log,
                           allow_empty=args.allow_empty)
    print(f"world {name} written to {dest} in {time.monotonic() - start:.1f}s (use it: hqa world use {name if not args.out else dest})")
    print(json.dumps({k: manifest[k] for k in ("name", "version", "kg", "labels", "counts")}, indent=2))
    return 0


def _open(args: argparse.Namespace, settings, benchmark: str | None = None):
    """The program a command answers with (``--program``, ``--load`` or the shipped default), opened through
    :func:`hqa.app.open_program`; its load warnings are printed here, the same way for every command.
    ``benchmark``: the dataset being evaluated (its HumanIQ library serves an uncompiled humaniq / static /
    latefusion)."""
    from hqa.app import open_program

    opened = open_program(settings, program=None if args.load else args.program, load=args.load,
                          program_kwargs=_program_kwargs(args), benchmark=benchmark)
    for warning in opened.warnings:
        print(f"hqa: warning: {warning}", file=sys.stderr)
    return opened


# -- compile / compare / evaluate / runs -------------------------------------------------------------------------
def _program_kwargs(args: argparse.Namespace) -> dict:
    """``--program-kwargs`` parsed and checked against the program's constructor (one clear line otherwise)."""
    text = getattr(args, "program_kwargs", None)
    if not text:
        return {}
    if getattr(args, "load", None) or not args.program:
        raise ConfigError("--program-kwargs builds a program: name it with --program (a compiled program, --load or "
                          "the shipped default, keeps its own arguments)")
    try:
        kwargs = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"--program-kwargs is not JSON: {getattr(exc, 'msg', exc)}") from None
    if not isinstance(kwargs, dict):
        raise ConfigError("--program-kwargs must be a JSON object")
    from hqa.artifacts.store import check_program_kwargs

    check_program_kwargs(args.program, kwargs, "--program-kwargs")
    return kwargs


def _compile_options(args: argparse.Namespace, optimizer: str):
    from hqa.optimize.compile import CompileOptions

    kwargs = _program_kwargs(args)
    return CompileOptions(program=args.program, optimizer=optimizer, train=args.train, dev=args.dev,
                          train_limit=args.train_limit, dev_limit=args.dev_limit, metric=args.metric, k=args.k,
                          threads=args.threads, seed=args.seed, program_kwargs=kwargs,
                          human_datasets=tuple(d.strip() for d in args.human_datasets.split(",") if d.strip()),
                          budget=args.budget,
                          max_bootstrapped_demos=args.max_bootstrapped_demos,
                          max_labeled_demos=args.max_labeled_demos,
                          exclude=tuple(d.strip() for d in (args.exclude or "").split(",") if d.strip()),
                          ).validate()


def cmd_compile(args: argparse.Namespace) -> int:
    from hqa.artifacts.store import check_name
    from hqa.jobs.compile import compile_and_save

    settings = _settings(args)
    opts = _compile_options(args, args.optimizer)
    if args.alias and not args.register:
        raise ConfigError("--alias needs --register NAME (the registered model the alias belongs to)")
    if args.register:
        check_name(args.register)
    from hqa.jobs.budget import Budget

    budget = Budget.from_args(args, settings.lm)
    result = compile_and_save(settings, opts, name=args.name, evaluate_dev=not args.no_eval, progress=True,
                              register=args.register, configure=True, force=args.force, budget=budget,
                              estimate=_estimate_printer(args, settings,
                                                         f"compile {opts.program} with {opts.optimizer}"))
    if args.alias and result.get("registered"):
        from hqa.tracking.registry import set_alias

        result["alias"] = set_alias(settings, args.register, str(result["registered"]).rsplit("/", 1)[1], args.alias)
    print(json.dumps(result, indent=2, default=str))
    return 0


def cmd_registry(args: argparse.Namespace) -> int:
    from hqa.tracking.registry import set_alias

    settings = _settings(args)
    if not args.version.isdigit():
        raise ConfigError(f"VERSION must be a registered model version number, got {args.version!r}")
    print(f"{set_alias(settings, args.name, args.version, args.alias)} -> models:/{args.name}/{args.version}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from hqa.artifacts.store import check_program_kwargs
    from hqa.jobs.compare import COMPARE_ARMS, arm_options, compare, compare_benchmarks, parse_vary
    from hqa.programs import build_program

    from hqa.jobs.budget import Budget

    settings = _settings(args)
    budget = Budget.from_args(args, settings.lm)
    devs = tuple(d.strip() for d in args.dev.split(",") if d.strip())
    args.dev = devs[0] if devs else args.dev
    opts = _compile_options(args, "none")
    variants = parse_vary(args.vary) if args.vary else ()
    arms = tuple(a.strip() for a in args.arms.split(",")) if args.arms else ("none",) if variants else COMPARE_ARMS
    for dev in devs:
        for arm in arms:  # validate every arm on every benchmark before spending LM calls
            arm_options(replace(opts, dev=dev), arm).validate()
    for _, kwargs in variants:
        check_program_kwargs(args.program, {**opts.program_kwargs, **kwargs}, "--vary")
        build_program(args.program, **{**opts.program_kwargs, **kwargs})  # the constructor's own checks
    if len(devs) > 1:  # one compare per benchmark, each with its own human library (HumanIQ §3)
        if variants:
            raise ConfigError("--vary runs on one --dev set; run one compare per benchmark")
        result = compare_benchmarks(settings, opts, devs, arms=arms, out_dir=Path(args.out) if args.out else None,
                                    progress=True, configure=True, budget=budget, fresh=args.fresh,
                                    estimate=_estimate_printer(args, settings, f"compare {opts.program}"))
        print(Path(result["table"]).read_text(encoding="utf-8"))
        print(f"summary: {result['table']}\ncsv: {result['csv']}")
        return 0
    result = compare(settings, opts, arms=arms, out_dir=Path(args.out) if args.out else None, progress=True,
                     variants=variants, configure=True, budget=budget, fresh=args.fresh,
                     estimate=_estimate_printer(args, settings, f"compare {opts.program}"))
    print(Path(result["table"]).read_text(encoding="utf-8"))
    if variants:  # one row per program-kwargs arm, EM and F1 (the layout of SS-CoT Table 3)
        key = next(iter(variants[0][1]))
        print(f"| {key} | EM | F1 |\n|---|---|---|")
        for row in result["rows"]:
            print(f"| {row['arm']} | {row['em']:.2f} | {row['f1']:.2f} |")
        print()
    print(f"table: {result['table']}\ncsv: {result['csv']}\nplot: {result['plot']}\nmlflow run: {result['run_id']}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from hqa.artifacts.store import list_artifacts
    from hqa.tracking.registry import list_runs

    settings = _settings(args)
    runs = list_runs(settings, max_results=args.limit)
    if args.json:
        print(json.dumps({"runs": runs, "programs": list_artifacts(settings.artifacts_dir / "programs")},
                         indent=2, default=str))
        return 0
    print(f"MLflow store: {settings.tracking_uri}  (UI: mlflow ui --backend-store-uri {settings.tracking_uri})")
    for r in runs:  # compile, evaluate and compare runs (a compare's arms indented under it)
        metrics = ", ".join(f"{k}={v:.3f}" if not k.endswith(("_n", "_errors")) else f"{k}={int(v)}"
                            for k, v in r["headline"].items())
        rec = r.get("record") or {}
        what = " ".join(f"{k[4:]}={rec[k]}" for k in ("hqa.lm", "hqa.reranker", "hqa.git_commit") if rec.get(k))
        indent = "  " if r.get("parent") else ""
        print(f"{indent}{r['start']}  {r['run_id'][:8]}  {r['status']:<9} {r['job'] or '-':<8} {r['name']}  "
              f"{metrics or '(no metrics)'}" + (f"  [{what}]" if what else ""))
    programs = list_artifacts(settings.artifacts_dir / "programs")
    if programs:
        print("\ncompiled programs:")
        for m in programs:
            print(f"  {settings.artifacts_dir / 'programs' / m.get('name', '?')}  {m.get('program')} / "
                  f"{m.get('optimizer')}  {m.get('metrics', {})}")
    return 0


def _estimate_printer(args: argparse.Namespace, settings, label: str):
    """The ``estimate`` callback of :func:`hqa.jobs.evaluate.evaluate`: one line on stderr (None with --no-estimate)."""
    if getattr(args, "no_estimate", False):
        return None
    from hqa.jobs.budget import estimate_line, price_for

    price = price_for(settings.lm)

    def show(prof, left: int, source: str, **extra) -> None:
        from tqdm import tqdm

        tqdm.write(estimate_line(label, prof, left, args.threads, source, price, **extra), file=sys.stderr)

    return show


def _add_budget_args(sp: argparse.ArgumentParser) -> None:
    """``--max-lm-calls``, ``--max-cost`` and ``--no-estimate`` (hqa.jobs.budget), the same for every command that runs."""
    sp.add_argument("--max-lm-calls", type=int, help="stop once this run's questions made this many LM requests; "
                                                     "the rows so far are kept and a rerun resumes")
    sp.add_argument("--max-cost", type=float, metavar="DOLLARS",
                    help="stop once this run's questions cost this many US dollars at the LM's price in "
                         "hqa/data/prices.json (the embedded model costs 0; an unlisted model is refused)")
    sp.add_argument("--no-estimate", action="store_true",
                    help="do not print the estimate of LM calls, tokens, cost and time before the run")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import RunFolder
    from hqa.data.datasets import load_examples

    if args.limit is not None and args.limit < 1:
        raise HQAError(f"--limit must be at least 1, got {args.limit}")
    settings = _settings(args)
    from hqa.jobs.budget import Budget

    budget = Budget.from_args(args, settings.lm)  # a bad budget or an unpriced model: refused before any work
    examples = load_examples(args.dataset, args.limit)
    opened = _open(args, settings, benchmark=args.dataset)
    program, label = opened.program, opened.label.replace(":/", "-").replace("/", "-")
    out_dir = Path(args.out) if args.out else settings.artifacts_dir / "eval" / f"{label}-{args.dataset.replace('/', '-')}"
    from hqa.reports.summary import write_report

    from hqa.tracking import runs as tracing

    tag = {"program": str(Path(args.load).resolve()) if args.load else (args.program or f"default:{opened.version}"),
           "dataset": args.dataset}
    if args.program_kwargs:  # another configuration of the program is another run
        tag["program_kwargs"] = _program_kwargs(args)
    params = {"job": "evaluate", **tag, "limit": args.limit, "threads": args.threads, "out": str(out_dir),
              "lm": f"{settings.lm.provider}:{settings.lm.model or 'SmolLM2-135M'}"}
    traces = args.trace or settings.tracking.traces  # each question an MLflow trace in this run
    with tracing.run(settings, f"evaluate:{label}:{args.dataset}", params=params, tags={"job": "evaluate"},
                      autolog=traces) as active:
        from hqa.tracking.record import log_record, run_record

        log_record(run_record(settings, program=program, toolbox=opened.toolbox,
                              datasets={"eval": (args.dataset, examples)}))
        if traces:
            tracing.enable_traces(settings, opened, store=False)
        summary = evaluate(program, examples, threads=args.threads, out=RunFolder(out_dir).rows_path,
                           resume=not args.fresh, progress=True, tag=tag, budget=budget,
                           estimate=_estimate_printer(args, settings, label))
        if summary.n == 0:
            raise HQAError(f"dataset {args.dataset} gave no questions")
        write_report(out_dir, title=f"{label} on {args.dataset}")
        tracing.log_summary(summary, "eval")
        tracing.log_report(out_dir)
        if traces:  # MLflow's evaluation view: part of the tracing opt-in (it costs ~6.5 s a run, load ~0)
            from hqa.jobs.evaluate import log_genai_evaluation

            log_genai_evaluation(summary.rows, model_id=tracing.logged_model_id(opened))
    print(RunFolder(out_dir).summary_md.read_text(encoding="utf-8"))
    print(f"report: {out_dir}/summary.md, summary.json, metrics.png, agreement.png; rows: {summary.path}; "
          f"mlflow run: {active.info.run_id}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from hqa.reports.compare import compare_markdown, compare_runs
    from hqa.reports.library import library_markdown, library_stats
    from hqa.reports.summary import write_report
    from hqa.schemas.run_folder import RunFolder, read_rows

    if args.action == "divknowqa":  # DIVKNOWQA Tables 2-6 over detllm arms (hqa/reports/divknowqa.py)
        from hqa.reports.divknowqa import divknowqa_markdown, divknowqa_tables

        if not args.runs:
            raise HQAError("usage: hqa report divknowqa RUN_DIR [RUN_DIR ...] [--closed-book RUN_DIR]")
        result = divknowqa_tables([Path(r) for r in args.runs],
                                  Path(args.closed_book) if args.closed_book else None)
        print(json.dumps(result, indent=2, default=str) if args.json else divknowqa_markdown(result))
        return 0
    if args.action == "sscot":  # SS-CoT Tables 1-3 over closedbook / cot / sscot runs (hqa/reports/sscot.py)
        from hqa.reports.sscot import sscot_markdown, sscot_tables

        if not args.runs:
            raise HQAError("usage: hqa report sscot RUN_DIR [RUN_DIR ...]")
        result = sscot_tables([Path(r) for r in args.runs])
        print(json.dumps(result, indent=2, default=str) if args.json else sscot_markdown(result))
        return 0
    if args.action == "thoughts":  # HumanIQ Table 8: generated vs human-written thoughts (JSD)
        from hqa.data.human import load_human_library
        from hqa.reports.thoughts import run_thoughts, thought_divergence, thought_markdown
        from hqa.retrievers.embedding.encoders import DEFAULT_EMBEDDER, embed

        if len(args.runs) != 2:
            raise HQAError("usage: hqa report thoughts BASELINE_RUN HQA_RUN [--dataset compmix|mintaka|qald|all] "
                           "(runs: folders or compare's ARM.jsonl)")
        names = ("mintaka", "qald", "compmix") if args.dataset in (None, "all") else (args.dataset,)
        human = [[st.thought.strip() for st in d.steps if st.thought and st.thought.strip()]
                 for d in load_human_library(names, path=Path(args.library) if args.library else None)]
        base, hqa_rows = (read_rows(RunFolder.of(r)[1])
                          for r in args.runs)  # a run folder, or one arm's rows of hqa compare (ARM.jsonl)
        if not base or not hqa_rows:
            raise HQAError("both runs need predictions.jsonl rows (hqa evaluate --out RUN)")
        result = thought_divergence(run_thoughts(base), run_thoughts(hqa_rows), human,
                                    lambda texts: embed(texts, DEFAULT_EMBEDDER))
        print(json.dumps(result, indent=2) if args.json else thought_markdown(result, DEFAULT_EMBEDDER))
        return 0
    if args.action == "library":  # HumanIQ RQ8: tool calls and tokens per human solution process
        if args.runs:
            raise HQAError("usage: hqa report library [--dataset compmix|mintaka|qald|all] [--library DIR]")
        names = ("mintaka", "qald", "compmix") if args.dataset in (None, "all") else (args.dataset,)
        stats = library_stats(names, path=Path(args.library) if args.library else None)
        print(json.dumps(stats, indent=2) if args.json else library_markdown(stats))
        return 0
    if args.action == "import":  # the HumanIQ authors' GPT-4 outputs as a run folder
        from hqa.data.authors_runs import import_run

        if not args.runs or not args.out:
            raise HQAError("usage: hqa report import FILE [FILE ...] --out RUN_DIR [--dataset compmix|mintaka|qald]")
        dataset = None if args.dataset in (None, "all") else args.dataset
        from hqa.data.store import data_path

        info = import_run([data_path(f) for f in args.runs], Path(args.out), benchmark=dataset,
                          skip_empty=args.skip_empty, overwrite=args.fresh)
        summary = write_report(Path(args.out), title=f"HumanIQ authors' GPT-4 run ({info['kind']}, "
                                                     f"{info['benchmark']})")
        print(json.dumps(summary, indent=2, default=str) if args.json else
              RunFolder(args.out).summary_md.read_text(encoding="utf-8"))
        return 0
    if args.action == "show":
        if not args.runs or (len(args.runs) > 1 and not args.out):
            raise HQAError("usage: hqa report show RUN_DIR, or hqa report show RUN_DIR RUN_DIR ... --out POOLED_DIR")
        if len(args.runs) > 1:  # one report over several runs (HumanIQ Table 5's per-benchmark and Aggregated)
            from hqa.reports.summary import pool_runs

            summary, folder = pool_runs([Path(r) for r in args.runs], Path(args.out)), Path(args.out)
        else:
            summary, folder = write_report(Path(args.runs[0])), Path(args.runs[0])
        print(json.dumps(summary, indent=2, default=str) if args.json else
              RunFolder(folder).summary_md.read_text(encoding="utf-8"))
        return 0
    if len(args.runs) != 2:
        raise HQAError("usage: hqa report compare RUN_A RUN_B")
    result = compare_runs(Path(args.runs[0]), Path(args.runs[1]), metric=args.metric)
    print(json.dumps(result, indent=2) if args.json else compare_markdown(result))
    return 0


# -- batch ---------------------------------------------------------------------------------------------------
def cmd_batch(args: argparse.Namespace) -> int:
    from hqa.jobs.batch import read_questions, run_batch

    if args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    questions = read_questions(Path(args.input))
    settings = _settings(args)
    opened = _open(args, settings)
    if args.trace or settings.tracking.traces:  # every question an MLflow trace in the configured tracking store
        from hqa.tracking.runs import enable_traces

        enable_traces(settings, opened)
    summary = run_batch(opened.program, questions, Path(args.out), threads=args.threads, resume=not args.fresh,
                        progress=not args.quiet)
    print(f"{summary.n} questions answered ({summary.errors} failed; a rerun asks those again) -> {args.out}")
    return 0


# -- serve ---------------------------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    from hqa.app import warm_up
    from hqa.artifacts.store import list_artifacts
    from hqa.serve import ServeOptions, check_bind, create_app

    api_key = os.environ.get(args.api_key_env) or None
    check_bind(args.host, api_key)
    if not 1 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a TCP port")
    from hqa.serve.api import MAX_BODY_BYTES

    max_body = MAX_BODY_BYTES if args.max_body_bytes is None else args.max_body_bytes
    if args.workers < 1 or args.queue < 0 or args.timeout <= 0 or max_body < 1024:
        raise ConfigError("--workers must be >= 1, --queue >= 0, --timeout > 0 and --max-body-bytes >= 1024")
    if not 0 < args.read_timeout <= 3600:
        raise ConfigError(f"--read-timeout must be between 0 and 3600 seconds, got {args.read_timeout:g}")
    sock = _listen(args.host, args.port)  # a busy port is one line before anything is loaded or announced
    settings = _settings(args)
    opened = _open(args, settings)
    if args.trace or settings.tracking.traces:  # every question an MLflow trace (module, LM and tool spans)
        from hqa.tracking.runs import enable_traces

        enable_traces(settings, opened)
    app = create_app(opened, options=ServeOptions(workers=args.workers, queue=args.queue, timeout=args.timeout,
                                                  api_key=api_key, max_body_bytes=max_body,
                                                  read_timeout=args.read_timeout),
                     warmup=lambda: warm_up(settings, opened),
                     programs=lambda: list_artifacts(settings.artifacts_dir / "programs"))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access = logging.getLogger("hqa.access")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False
    from hqa.serve.server import run

    print(f"hqa: serving {opened.label} on http://{args.host}:{args.port}/ (docs at /docs)", file=sys.stderr,
          flush=True)
    run(app, sock, header_timeout=args.read_timeout)  # uvicorn, with a header-read timeout (slowloris)
    return 0


def _listen(host: str, port: int):
    """A socket bound to ``host:port`` and listening (handed to uvicorn); a port in use or an address this machine
    does not have is a one-line ConfigError."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        import errno

        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use: stop what listens there or pass --port")
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    sock.set_inheritable(True)
    return sock


# -- cache -----------------------------------------------------------------------------------------------------
def cmd_cache(args: argparse.Namespace) -> int:
    from hqa.retrievers import http as H
    from hqa.errors import DataError

    path = _settings(args).http_cache_path
    if args.action in ("stats", "export") and not path.exists():
        raise DataError(f"no HTTP cache at {path} (record one with http.cache_mode = record)")
    if args.action == "stats":
        stats = H.cache_stats(path)
        print(json.dumps(stats, indent=2) if args.json else
              f"{stats['path']}: {stats['responses']} responses, {stats['bytes']} bytes, "
              + ", ".join(f"{h} {n}" for h, n in sorted(stats["hosts"].items())))
        return 0
    if not args.file:
        raise DataError(f"usage: hqa cache {args.action} FILE.jsonl")
    if args.action == "export":
        print(f"exported {H.cache_export(path, args.file)} responses from {path} to {args.file}")
        return 0
    if not Path(args.file).is_file():
        raise DataError(f"cache export {args.file} does not exist")
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"imported {H.cache_import(path, args.file)} responses from {args.file} into {path}")
    return 0


# -- parser ----------------------------------------------------------------------------------------------------
def _at_least_one(text: str) -> int:
    """argparse type of counts such as ``--threads``: an integer >= 1 (argparse turns the error into one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default (unless its help already says it, or there is none to show)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or isinstance(action.default, bool) or action.default in ("", argparse.SUPPRESS) \
                or "default" in text.lower() \
                or not action.option_strings:
            return text
        return super()._get_help_string(action)


def _add_shared(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name (``hqa -v ask …`` = ``hqa ask -v …``); a
    subcommand's copies default to SUPPRESS so they never overwrite what was given before the subcommand."""
    kw = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument("--config", help="TOML config file (default: $HQA_CONFIG or ./hqa.toml)", **kw)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error", **kw)
    parser.add_argument("-v", "--verbose", action="count", help="also show the libraries' warnings (each once); -vv: "
                        "everything from INFO up (default: hqa's own warnings only)",
                        **(kw or {"default": 0}))


class _Parser(argparse.ArgumentParser):
    """Every ``hqa`` (sub)command's parser: defaults in ``--help``, and the shared options (:func:`_add_shared`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)
        _add_shared(self, suppress=True)


def _add_program_args(sp: argparse.ArgumentParser, names: list[str], load: bool = True) -> None:
    """The options of every command that answers with a program, the same everywhere."""
    if load:
        sp.add_argument("--program", choices=names, metavar="PROGRAM",
                        help="which program answers, one of: %(choices)s (default: the compiled default program "
                             "shipped with hqa)")
        sp.add_argument("--load", help="a compiled program folder (artifacts/programs/<name>), models:/NAME/VERSION "
                                       "or models:/NAME@ALIAS")
        sp.add_argument("--trace", action="store_true", help="log every question as an MLflow trace (LM and tool "
                                                             "calls as spans; the same as tracking.traces = true)")
    sp.add_argument("--program-kwargs", help="JSON object of program constructor arguments, e.g. '{\"choices\": 3}'")
    sp.add_argument("--lm", choices=["local", "openai", "openai_compatible"], help="override lm.provider")
    sp.add_argument("--model", help="override lm.model")
    sp.add_argument("--api-base", dest="api_base", help="override lm.api_base")
    sp.add_argument("--kg", choices=["oxigraph", "sparql"], help="override kg.kind")
    sp.add_argument("--endpoint", help="override kg.endpoint (SPARQL HTTP endpoint)")


def build_parser() -> argparse.ArgumentParser:
    from hqa.programs import ALIASES, PROGRAMS

    names = sorted([*PROGRAMS, *ALIASES])  # a deprecated alias keeps working (one line says so)
    p = argparse.ArgumentParser(prog="hqa", description="Hybrid-source question answering with DSPy programs",
                                formatter_class=_Help)
    _add_shared(p, suppress=False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ask = sub.add_parser("ask", help="answer one question and show the evidence trace")
    ask.add_argument("question", nargs="*", help="the question")
    _add_program_args(ask, names)
    ask.add_argument("--json", action="store_true", help="print answer and trace as JSON")
    ask.set_defaults(func=cmd_ask)

    cfg = sub.add_parser("config", help="show or change settings")
    cfg.add_argument("action", nargs="?", default="show", choices=["show", "set", "reset", "path"])
    cfg.add_argument("rest", nargs="*", help="for set: SECTION.KEY VALUE; for reset: [SECTION.KEY]")
    cfg.add_argument("--json", action="store_true")
    cfg.set_defaults(func=cmd_config)

    pack = sub.add_parser("pack", help="build or inspect the offline knowledge pack")
    pack.add_argument("action", choices=["build", "stats"])
    pack.add_argument("--data", "--shared", dest="shared",
                      help="read the recorded sources from this folder (the data directory's layout) instead of "
                           "pulling them into the data directory (hqa data list)")
    pack.add_argument("--quiet", action="store_true", help="no progress bar")
    pack.add_argument("--no-coverage", action="store_true", help="skip the benchmark coverage measurement")
    pack.add_argument("--no-leads", action="store_true",
                      help="build from the recorded sources only, without the 10k Wikipedia lead passages")
    pack.set_defaults(func=cmd_pack)

    data = sub.add_parser("data", help="the benchmarks and recordings hqa reads: list them, pull them from their "
                                       "origin (or a mirror) into the data directory")
    data.add_argument("action", choices=["list", "pull"])
    data.add_argument("names", nargs="*", metavar="NAME",
                      help="pull: datasets to fetch (hqa data list), 'all', or 'demo' (what the knowledge pack needs); "
                           "default all")
    data.add_argument("--json", action="store_true", help="list: as JSON")
    data.add_argument("--verify", action="store_true", help="list: hash every present file (slower)")
    data.add_argument("--quiet", action="store_true", help="pull: no progress bar")
    data.set_defaults(func=cmd_data)

    world = sub.add_parser("world", help="build, list, show, use or remove worlds (KG + labels + passages at scale)")
    world.add_argument("action", choices=["build", "list", "show", "use", "remove"])
    world.add_argument("ref", nargs="?", help="world NAME (under <artifacts>/worlds) or, for show/use, a world DIR")
    world.add_argument("--passages", action="append", metavar="FILE[:FORMAT]",
                       help="passages: DPR psgs_w100.tsv (dpr-tsv), KILT JSONL (kilt) or {id,title,text} JSONL (jsonl)")
    world.add_argument("--wikidata", action="append", metavar="FILE[:FORMAT]",
                       help="Wikidata dump: truthy N-Triples (nt) or JSON entity dump (json); plain, .gz or .bz2")
    world.add_argument("--entities", metavar="QIDS_FILE", help="keep only statements about these entities")
    world.add_argument("--properties", metavar="P31,P50,...", help="keep only these properties' statements")
    world.add_argument("--language", default="en", help="language of labels, aliases and descriptions (default en)")
    world.add_argument("--kg-engine", default="oxigraph", choices=["oxigraph", "virtuoso", "sparql"],
                       help="oxigraph: an embedded store in the world; virtuoso: load into a running Virtuoso; "
                            "sparql: the KG is an existing endpoint (--kg-endpoint, e.g. QLever)")
    world.add_argument("--kg-endpoint", help="with --kg-engine sparql: the SPARQL endpoint URL the world uses")
    world.add_argument("--virtuoso-endpoint", help="Virtuoso's SPARQL endpoint, e.g. http://127.0.0.1:8890/sparql")
    world.add_argument("--virtuoso-isql", default="127.0.0.1:1111", help="Virtuoso's SQL port (host:port)")
    world.add_argument("--virtuoso-user", default="dba")
    world.add_argument("--virtuoso-password-env", default="VIRTUOSO_PASSWORD",
                       help="environment variable holding the password (default: dba)")
    world.add_argument("--virtuoso-load-dir", help="a folder in the server's DirsAllowed for the filtered triples")
    world.add_argument("--virtuoso-graph", help="named graph (default urn:hqa:world:NAME)")
    world.add_argument("--dense-engine", help="vector engine of the passage index (see docs/worlds.md)")
    world.add_argument("--dense-uri", default="", help="a vector database server for the passage index (e.g. a "
                       "Milvus URI); empty = embedded in the world")
    world.add_argument("--embedder", default="minilm-int8",
                       help="passage embedder: minilm-int8 (default; MiniLM with int8 weights, 2x the passages/s), "
                            "minilm (the float model the pack uses), or a sentence-transformers path or hub id; "
                            "hqa world use sets models.embedder to it")
    world.add_argument("--chunk-triples", type=int, default=1_000_000, help="triples per load chunk / checkpoint")
    world.add_argument("--out", help="build into this folder instead of <artifacts>/worlds/NAME")
    world.add_argument("--fresh", action="store_true", help="discard an interrupted build instead of resuming it")
    world.add_argument("--allow-empty", action="store_true",
                       help="publish a world even when its dumps yield no triple or its passage files no passage "
                            "(refused otherwise, so --force never silently empties a world)")
    world.add_argument("--force", action="store_true", help="rebuild a world that already exists (built beside it; "
                       "the old world stays usable until the new one is complete)")
    world.add_argument("--quiet", action="store_true", help="no progress bars")
    world.add_argument("--json", action="store_true", help="list: as JSON")
    world.set_defaults(func=cmd_world)

    class _Optimizers:
        """The optimizer names, read from the compile package only when argparse checks or lists them (building
        the parser for ``hqa ask`` or ``hqa evaluate`` does not import it)."""

        def names(self):
            from hqa.optimize.compile import OPTIMIZERS

            return list(OPTIMIZERS)

        def __contains__(self, name):
            return name in self.names()

        def __iter__(self):
            return iter(self.names())

    def add_compile_args(sp, with_optimizer: bool):
        sp.add_argument("--program", default="humaniq", choices=names, metavar="PROGRAM",
                        help="the program to compile, one of: %(choices)s")
        _add_program_args(sp, names, load=False)
        if with_optimizer:
            sp.add_argument("--optimizer", default="dpp-human", choices=_Optimizers(), metavar="OPTIMIZER",
                            help="how the demos are chosen, one of: %(choices)s")
            sp.add_argument("--name", help="artifact name (default <program>-<optimizer>)")
            sp.add_argument("--no-eval", action="store_true", help="skip the dev evaluation")
            sp.add_argument("--force", action="store_true",
                            help="replace a compiled program already saved under the same name (default: refuse)")
            sp.add_argument("--register", help="also register the MLflow model under this name (models:/NAME/N)")
            sp.add_argument("--alias", help="with --register: point this registry alias at the new version "
                                            "(models:/NAME@ALIAS)")
        sp.add_argument("--train", default="compmix/dev", help="dataset spec for training (e.g. compmix/dev)")
        sp.add_argument("--dev", default="humaniq-compmix", help="dataset spec for evaluation")
        sp.add_argument("--train-limit", type=int, default=20, help="most training questions used")
        sp.add_argument("--dev-limit", type=int, default=20, help="most evaluation questions used")
        sp.add_argument("--metric", default="recall", choices=["em", "f1", "recall", "hits1"],
                        help="the metric the optimizer maximises and the table reports")
        sp.add_argument("--k", type=int, default=3, help="number of few-shot demos")
        sp.add_argument("--threads", type=_at_least_one, default=1, help="questions answered at once")
        sp.add_argument("--seed", type=int, default=0, help="seed of the optimizer's random choices")
        sp.add_argument("--budget", type=int, help="GEPA: max metric calls (default: auto=light)")
        _add_budget_args(sp)
        sp.add_argument("--max-bootstrapped-demos", type=int, default=2,
                        help="bootstrap/mipro: most demos taken from the program's own successful traces")
        sp.add_argument("--max-labeled-demos", type=int, default=2,
                        help="bootstrap/mipro: most demos taken from labeled train examples (question → gold answer)")
        sp.add_argument("--exclude", help="dataset specs whose questions never become demos, besides --dev "
                                          "(comma-separated; 'eval' = every evaluation set)")
        sp.add_argument("--human-datasets", default="",
                        help="HumanIQ libraries that supply human demos (default: the --dev benchmark's own, as in "
                             "the paper; 'pooled' = all three; or a list of mintaka,qald,compmix)")

    comp = sub.add_parser("compile", help="compile a program with an optimizer, evaluate, save, track in MLflow")
    add_compile_args(comp, True)
    comp.set_defaults(func=cmd_compile)

    cmp_ = sub.add_parser("compare", help="human vs automatic few-shots on one dev set: table, CSV, plot")
    add_compile_args(cmp_, False)
    cmp_.add_argument("--arms", help="comma-separated optimizers, optimizer@k for k demos (default: HumanIQ RQ5's "
                                     "arms, then bootstrap, mipro, human+bootstrap; 'none' with --vary); --dev may "
                                     "list several benchmarks")
    cmp_.add_argument("--vary", help="program-kwargs arms KEY=V1;V2;... crossed with the optimizer arms, e.g. "
                                     "--program sscot --vary 'sources=kg,text,model;text,kg,model;model'")
    cmp_.add_argument("--out", help="output folder (default artifacts/compare/<program>-<time>)")
    cmp_.add_argument("--fresh", action="store_true", help="start a new compare instead of resuming a stopped one "
                                                           "with the same arguments (reusing its finished arms)")
    cmp_.set_defaults(func=cmd_compare)

    ev = sub.add_parser("evaluate", help="evaluate a program or compiled artifact on a dataset (resumable)")
    _add_program_args(ev, names)
    ev.add_argument("--dataset", default="humaniq-compmix", help="dataset spec (e.g. compmix/test, mintaka/test)")
    ev.add_argument("--limit", type=int, help="most questions answered (default: all)")
    ev.add_argument("--threads", type=_at_least_one, default=1, help="questions answered at once")
    ev.add_argument("--out", help="output folder (default artifacts/eval/<program>-<dataset>)")
    ev.add_argument("--fresh", action="store_true", help="discard earlier results instead of resuming")
    _add_budget_args(ev)
    ev.set_defaults(func=cmd_evaluate)

    rep = sub.add_parser("report", help="reports on evaluation runs: show one, compare two (paired), statistics of "
                                        "the human library (HumanIQ RQ8), import the HumanIQ authors' GPT-4 outputs, "
                                        "DIVKNOWQA's tables over detllm runs, SS-CoT's Tables 1-3, HumanIQ Table 8 "
                                        "(thoughts)")
    rep.add_argument("action", choices=["show", "compare", "library", "import", "divknowqa", "sscot",
                                           "thoughts"])
    rep.add_argument("runs", nargs="*", help="run folders (with predictions.jsonl); for import, the authors' files "
                                             "(paths, or data-directory names such as humaniq/long_data/<file>.json and "
                                             "humaniq/late_fusion/<file>.json, fetched on first use)")
    rep.add_argument("--metric", default="recall", choices=["em", "f1", "recall", "hits1", "qald_f1"])
    rep.add_argument("--dataset", choices=["compmix", "mintaka", "qald", "all"],
                     help="library: whose processes (default all); import: the benchmark (default: from file names)")
    rep.add_argument("--library", help="library: a folder laid out like hqa/data/humaniq (default: the shipped one)")
    rep.add_argument("--out", help="import: the run folder to write; show with several runs: the pooled folder")
    rep.add_argument("--fresh", action="store_true", help="import: replace an existing run folder's rows")
    rep.add_argument("--skip-empty", action="store_true",
                     help="import: leave out the empty records of the authors' file instead of keeping error rows")
    rep.add_argument("--json", action="store_true")
    rep.add_argument("--closed-book", help="divknowqa: a closedbook run folder for DIVKNOWQA Table 4's overlap")
    rep.set_defaults(func=cmd_report)

    bat = sub.add_parser("batch", help="answer a .jsonl/.csv of questions into a resumable JSONL with traces")
    bat.add_argument("input", help="questions: .jsonl (objects with question[, id]) or .csv (question[,id] header)")
    bat.add_argument("--out", required=True, help="output .jsonl (appended per question; reruns resume)")
    _add_program_args(bat, names)
    bat.add_argument("--threads", type=_at_least_one, default=1, help="questions answered at once")
    bat.add_argument("--fresh", action="store_true", help="discard earlier rows instead of resuming")
    bat.add_argument("--quiet", action="store_true", help="no progress bar")
    bat.set_defaults(func=cmd_batch)

    srv = sub.add_parser("serve", help="HTTP API and web page over one program (FastAPI + uvicorn)")
    _add_program_args(srv, names)
    srv.add_argument("--host", default="127.0.0.1", help="bind address (beyond loopback needs an API key)")
    srv.add_argument("--port", type=int, default=8000, help="TCP port")
    srv.add_argument("--workers", type=int, default=2, help="questions answered at once")
    srv.add_argument("--queue", type=int, default=16, help="requests allowed to wait; beyond that 503 busy")
    srv.add_argument("--timeout", type=float, default=300.0, help="seconds per request before 504")
    srv.add_argument("--max-body-bytes", type=int,
                     help="largest request body read (default 64 KiB); larger ones get 413 before they are read")
    srv.add_argument("--read-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="time a client has to send its request headers, then each piece of its body (default 10; "
                          "slower connections are closed / answered 408)")
    srv.add_argument("--api-key-env", default="HQA_API_KEY",
                     help="environment variable holding the API key (Authorization: Bearer)")
    srv.set_defaults(func=cmd_serve)

    reg = sub.add_parser("registry", help="the MLflow model registry: point an alias at a version")
    reg_sub = reg.add_subparsers(dest="action", required=True)
    alias = reg_sub.add_parser("alias", help="set models:/NAME@ALIAS to version VERSION")
    alias.add_argument("name")
    alias.add_argument("version")
    alias.add_argument("alias")
    alias.set_defaults(func=cmd_registry)

    cache = sub.add_parser("cache", help="the live-source HTTP cache: stats, export to / import from JSONL")
    cache.add_argument("action", choices=["stats", "export", "import"])
    cache.add_argument("file", nargs="?", help="for export/import: a JSONL file")
    cache.add_argument("--json", action="store_true")
    cache.set_defaults(func=cmd_cache)

    runs = sub.add_parser("runs", help="list MLflow runs and compiled programs")
    runs.add_argument("--limit", type=int, default=50, help="most runs listed (newest first)")
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(func=cmd_runs)
    return p


def _write_crash_log() -> str:
    """The current exception's traceback written to a new file under the temp folder; its path."""
    import tempfile
    import traceback

    try:
        fd, path = tempfile.mkstemp(prefix="hqa-error-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(" ".join(sys.argv) + "\n\n" + traceback.format_exc())
        return path
    except OSError as exc:
        return f"(no log written: {exc.strerror or exc})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from hqa.io.logs import configure_output

    configure_output(getattr(args, "verbose", 0) or 0)  # quiet by default: hqa's own warnings, once each
    try:
        return args.func(args)
    except HQAError as exc:  # messages may quote input (a dump line, a file name): its control bytes escaped
        print(f"hqa: error: {escape_controls(exc)}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return _reader_gone()
    except OSError as exc:
        if exc.filename is None or getattr(args, "debug", False):
            return _unexpected(exc, args)
        # a file the command was told to read or write (--out /proc/x, a full disk, a folder without permission)
        print(f"hqa: error: cannot use {escape_controls(exc.filename)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the last-resort handler
        return _unexpected(exc, args)
    except KeyboardInterrupt:
        print("hqa: interrupted", file=sys.stderr)
        return 130


def _reader_gone() -> int:
    """stdout's reader went away (``hqa world show | head -1``): one line on stderr, stdout pointed at /dev/null so
    the interpreter's final flush does not fail again, and the exit status a process killed by SIGPIPE has."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    try:
        print("hqa: output stopped: the command reading it exited (broken pipe)", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return 141


def _unexpected(exc: BaseException, args: argparse.Namespace) -> int:
    """Any other exception, called inside main's ``except``: DSPy's LM errors as a line, the rest as one line naming
    a log file with the traceback (``--debug`` re-raises)."""
    try:
        from dspy.utils.exceptions import LMError
    except Exception:  # noqa: BLE001 - the last-resort handler must not fail on an import
        LMError = ()  # type: ignore[assignment]  # noqa: N806
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if LMError and isinstance(exc, LMError):
        print(f"hqa: error: the LM failed ({type(exc).__name__}): {first[:300]}", file=sys.stderr)
        return 2
    if getattr(args, "debug", False):
        raise exc
    log = _write_crash_log()
    print(f"hqa: error: unexpected {type(exc).__name__}: {escape_controls(first[:300])} (details in {log}; rerun "
          "with --debug for the traceback)", file=sys.stderr)
    return 1


_FAST_EXIT: list[bool] = []


def run() -> None:
    """The ``hqa`` command (and ``python -m hqa.cli``): :func:`main`, then after a finished ``hqa ask`` the process
    ends without tearing the interpreter down (:func:`_exit_now`): the answer is printed, and freeing dspy's,
    litellm's and the retrievers' objects one by one took ~0.7 s (issue 31) of a command whose target is 3 s."""
    code = main()
    try:
        sys.stdout.flush()  # what is still buffered goes now, where a gone reader is one line (not at teardown)
    except BrokenPipeError:
        code = _reader_gone()
    if _FAST_EXIT:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """End the process with ``code`` as a normal exit would, in the same order, minus module teardown and garbage
    collection: stdout / stderr flushed, non-daemon threads and thread pools finished (``threading._shutdown``),
    the ``atexit`` handlers run (subprocesses killed, caches closed), then ``os._exit``."""
    import atexit
    import threading

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be shown
            pass
    shutdown = getattr(threading, "_shutdown", None)  # CPython's own first exit step
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
