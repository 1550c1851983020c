"""``hqa pack build|stats``: build or inspect the offline knowledge pack."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hqa.cli import args as shared


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("action", choices=["build", "stats"])
    sp.add_argument("--data", "--shared", dest="shared",
                    help="read the recorded sources from this folder (the data directory's layout) instead of "
                         "pulling them into the data directory (hqa data list)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--no-coverage", action="store_true", help="skip the benchmark coverage measurement")
    sp.add_argument("--no-leads", action="store_true",
                    help="build from the recorded sources only, without the 10k Wikipedia lead passages")


def run(args: argparse.Namespace) -> int:
    from hqa.data.pack_manifest import read_manifest
    from hqa.world.pack import build_pack

    settings = shared.settings(args)
    dest = settings.pack_dir
    if args.action == "build":
        shared_dir = Path(args.shared) if args.shared else None
        manifest = build_pack(dest, shared=shared_dir, progress=not args.quiet, coverage=not args.no_coverage,
                              **({"leads": None} if args.no_leads else {}))
        print(f"knowledge pack {manifest['version']} written to {dest}")
    else:
        manifest = read_manifest(dest)
    print(json.dumps(manifest, indent=2))
    return 0
