"""``hqa registry alias NAME VERSION ALIAS``: the MLflow model registry (this module is not called ``registry``:
that name is :mod:`hqa.cli.registry`, the command table)."""

from __future__ import annotations

import argparse

from hqa.cli import args as shared
from hqa.errors import ConfigError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    actions = sp.add_subparsers(dest="action", required=True)
    alias = actions.add_parser("alias", help="set models:/NAME@ALIAS to version VERSION")
    alias.add_argument("name")
    alias.add_argument("version")
    alias.add_argument("alias")


def run(args: argparse.Namespace) -> int:
    from hqa.tracking.registry import set_alias

    settings = shared.settings(args)
    if not args.version.isdigit():
        raise ConfigError(f"VERSION must be a registered model version number, got {args.version!r}")
    print(f"{set_alias(settings, args.name, args.version, args.alias)} -> models:/{args.name}/{args.version}")
    return 0
