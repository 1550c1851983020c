"""``hqa config [show|set|reset|path]``: show or change settings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hqa.cli import args as shared
from hqa.errors import ConfigError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("action", nargs="?", default="show", choices=["show", "set", "reset", "path"])
    sp.add_argument("rest", nargs="*", help="for set: SECTION.KEY VALUE; for reset: [SECTION.KEY]")
    sp.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
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
    settings = shared.settings(args)
    data = settings.as_dict()
    data["derived"] = {"artifacts_dir": str(settings.artifacts_dir), "kg_path": str(settings.kg_path),
                       "world_dir": str(settings.world_dir or settings.pack_dir),
                       "tracking_uri": settings.tracking_uri}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(C.dump_toml(data))
    return 0
