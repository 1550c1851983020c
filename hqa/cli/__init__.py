"""``hqa`` command line: :mod:`hqa.cli.entry` (parser, main, exit), :mod:`hqa.cli.registry` (the commands and report
kinds by name, imported when used), :mod:`hqa.cli.args` (the shared argument groups), :mod:`hqa.cli.output`
(presentation) and one module per command."""

from hqa.cli.entry import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
