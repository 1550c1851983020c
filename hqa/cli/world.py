"""``hqa world build|list|show|use|remove``: worlds (KG + labels + passages at scale, docs/worlds.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from hqa.cli import args as shared
from hqa.cli.output import counted
from hqa.errors import ConfigError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("action", choices=["build", "list", "show", "use", "remove"])
    sp.add_argument("ref", nargs="?", help="world NAME (under <artifacts>/worlds) or, for show/use, a world DIR")
    sp.add_argument("--passages", action="append", metavar="FILE[:FORMAT]",
                    help="passages: DPR psgs_w100.tsv (dpr-tsv), KILT JSONL (kilt) or {id,title,text} JSONL (jsonl)")
    sp.add_argument("--wikidata", action="append", metavar="FILE[:FORMAT]",
                    help="Wikidata dump: truthy N-Triples (nt) or JSON entity dump (json); plain, .gz or .bz2")
    sp.add_argument("--entities", metavar="QIDS_FILE", help="keep only statements about these entities")
    sp.add_argument("--properties", metavar="P31,P50,...", help="keep only these properties' statements")
    sp.add_argument("--language", default="en", help="language of labels, aliases and descriptions (default en)")
    sp.add_argument("--kg-engine", default="oxigraph", choices=["oxigraph", "virtuoso", "sparql"],
                    help="oxigraph: an embedded store in the world; virtuoso: load into a running Virtuoso; "
                         "sparql: the KG is an existing endpoint (--kg-endpoint, e.g. QLever)")
    sp.add_argument("--kg-endpoint", help="with --kg-engine sparql: the SPARQL endpoint URL the world uses")
    sp.add_argument("--virtuoso-endpoint", help="Virtuoso's SPARQL endpoint, e.g. http://127.0.0.1:8890/sparql")
    sp.add_argument("--virtuoso-isql", default="127.0.0.1:1111", help="Virtuoso's SQL port (host:port)")
    sp.add_argument("--virtuoso-user", default="dba")
    sp.add_argument("--virtuoso-password-env", default="VIRTUOSO_PASSWORD",
                    help="environment variable holding the password (default: dba)")
    sp.add_argument("--virtuoso-load-dir", help="a folder in the server's DirsAllowed for the filtered triples")
    sp.add_argument("--virtuoso-graph", help="named graph (default urn:hqa:world:NAME)")
    sp.add_argument("--dense-engine", help="vector engine of the passage index (see docs/worlds.md)")
    sp.add_argument("--dense-uri", default="", help="a vector database server for the passage index (e.g. a "
                    "Milvus URI); empty = embedded in the world")
    sp.add_argument("--embedder", default="minilm-int8",
                    help="passage embedder: minilm-int8 (default; MiniLM with int8 weights, 2x the passages/s), "
                         "minilm (the float model the pack uses), or a sentence-transformers path or hub id; "
                         "hqa world use sets models.embedder to it")
    sp.add_argument("--chunk-triples", type=int, default=1_000_000, help="triples per load chunk / checkpoint")
    sp.add_argument("--out", help="build into this folder instead of <artifacts>/worlds/NAME")
    sp.add_argument("--fresh", action="store_true", help="discard an interrupted build instead of resuming it")
    sp.add_argument("--allow-empty", action="store_true",
                    help="publish a world even when its dumps yield no triple or its passage files no passage "
                         "(refused otherwise, so --force never silently empties a world)")
    sp.add_argument("--force", action="store_true", help="rebuild a world that already exists (built beside it; "
                    "the old world stays usable until the new one is complete)")
    sp.add_argument("--quiet", action="store_true", help="no progress bars")
    sp.add_argument("--json", action="store_true", help="list: as JSON")


def run(args: argparse.Namespace) -> int:
    from hqa.errors import WorldError
    from hqa.world import build as B

    settings = shared.settings(args)
    if args.action == "list":
        return _list(args, settings)
    if not args.ref:
        raise ConfigError(f"usage: hqa world {args.action} NAME" + ("|DIR" if args.action != "remove" else ""))
    if args.action == "build":
        return _build(args, settings)
    if args.action == "remove":
        from hqa.retrievers.world_manifest import check_name

        world = B.worlds_dir(settings.artifacts_dir) / check_name(args.ref)
        if settings.world_dir is not None and world == settings.world_dir:
            raise WorldError(f"world {args.ref} is the configured world; switch away first (hqa config reset "
                             "world.path)")
        print(f"world {args.ref}: {B.remove_world(world)}")
        return 0
    from hqa.retrievers.world_manifest import open_world

    opened = open_world(_world_dir(settings, args.ref))
    if args.action == "show":
        print(json.dumps(opened.manifest, indent=2))
        return 0
    return _use(args, settings, opened)


def _list(args: argparse.Namespace, settings) -> int:
    from hqa.world import build as B

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
        parts = [f"kg={row['kg']}" + (f" ({counted(row['triples'], 'triple')})" if row.get("triples") else "")
                 if row.get("kg") else "no kg",
                 labels_part(row),
                 f"{counted(row['passages'], 'passage')} ({row['text_engine']})" if row.get("passages") else "no text"]
        print(f"{mark} {row['name']:<20} {', '.join(parts)}  {row['path']}")
    if not rows:
        print(f"no worlds under {B.worlds_dir(settings.artifacts_dir)} (build one: hqa world build NAME ...)")
    return 0


def _use(args: argparse.Namespace, settings, opened) -> int:
    """``hqa world use``: world.path (and the world's passage embedder) written to the config file."""
    from hqa import config as C
    from hqa.retrievers.embedding.memo import embedder_key
    from hqa.world import build as B

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


def _world_dir(settings, ref: str) -> Path:
    """A world given by name (``<artifacts>/worlds/NAME``) or by folder."""
    from hqa.world.build import worlds_dir
    from hqa.retrievers.world_manifest import check_name

    if "/" in ref or ref.startswith((".", "~")) or Path(ref).is_dir() and (Path(ref) / "world.json").exists():
        return Path(ref).expanduser().resolve()
    return worlds_dir(settings.artifacts_dir) / check_name(ref)


def labels_part(row: dict) -> str:
    """``hqa world list``'s label count: the manifest's labelled entities, not every entity the store holds."""
    if not row.get("entities"):
        return "no labels"
    labelled = row.get("labelled")
    if labelled is None or labelled == row["entities"]:
        return counted(row["entities"], "labelled entity", "labelled entities")
    return f"{counted(labelled, 'labelled entity', 'labelled entities')} (of {row['entities']:,})"


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


def _build(args: argparse.Namespace, settings) -> int:
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
