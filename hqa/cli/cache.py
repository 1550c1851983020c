"""``hqa cache stats|export|import``: the live-source HTTP cache (hqa.retrievers.http)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hqa.cli import args as shared


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("action", choices=["stats", "export", "import"])
    sp.add_argument("file", nargs="?", help="for export/import: a JSONL file")
    sp.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from hqa.retrievers import http as H
    from hqa.errors import DataError

    path = shared.settings(args).http_cache_path
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
    source = Path(args.file)
    if not source.exists():
        raise DataError(f"cache export {args.file} does not exist")
    if not source.is_file():  # /dev/zero, a pipe, a folder: an export is a JSONL file hqa cache export wrote
        raise DataError(f"cache export {args.file} is not a regular file: give the JSONL file hqa cache export wrote")
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"imported {H.cache_import(path, args.file)} responses from {args.file} into {path}")
    return 0
