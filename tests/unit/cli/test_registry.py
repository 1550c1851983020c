"""The ``hqa`` command's lazy registry (hqa/cli/registry.py): every command line reaches the ``run`` of the module the
registry names for it, every report kind its handler through the REPORT_KINDS table, and the one tracing rule of
hqa/cli/args.py (``--trace`` or ``tracking.traces``)."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import pytest

from hqa.cli import args as cli_args
from hqa.cli.entry import build_parser, main
from hqa.cli.registry import COMMANDS, REPORT_KINDS, command

# one valid command line per command
LINES = {"ask": ["ask", "q"], "config": ["config"], "pack": ["pack", "stats"], "data": ["data", "list"],
         "world": ["world", "list"], "compile": ["compile"], "compare": ["compare"], "evaluate": ["evaluate"],
         "report": ["report", "show", "run"], "batch": ["batch", "in.jsonl", "--out", "out.jsonl"],
         "serve": ["serve"], "registry": ["registry", "alias", "m", "1", "prod"], "cache": ["cache", "stats"],
         "runs": ["runs"], "study": ["study", "s.toml", "--dry-run"], "results": ["results", "--study", "s"],
         "train": ["train", "ranker"]}


def test_each_command_line_runs_the_module_the_registry_names():
    assert set(LINES) == set(COMMANDS)
    for name, line in LINES.items():
        args = build_parser().parse_args(line)
        assert args.command == name and args.func is command(name).run, name
    parser = build_parser()  # one parser parses twice: the second line does not declare the options again
    assert parser.parse_args(["ask", "--json", "q"]).json and not parser.parse_args(["ask", "q"]).json


def test_report_kinds_are_the_action_choices_and_each_runs_its_handler(monkeypatch, tmp_path):
    import hqa.cli.report as report

    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "hqa.toml"))
    assert len(set(REPORT_KINDS.values())) == len(REPORT_KINDS)  # one handler per kind
    for kind, ref in REPORT_KINDS.items():
        seen: list[str] = []
        module, attr = ref.split(":")
        assert module == "hqa.cli.report" and callable(getattr(report, attr))
        monkeypatch.setattr(report, attr, lambda args, seen=seen: seen.append(args.action) or 7)
        assert main(["report", kind]) == 7 and seen == [kind]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["report", "nope"])


def test_questions_are_traced_with_the_flag_or_the_setting(monkeypatch):
    import hqa.tracking.runs

    on, off = (SimpleNamespace(tracking=SimpleNamespace(traces=t)) for t in (True, False))
    assert cli_args.traces(Namespace(trace=True), off) and cli_args.traces(Namespace(trace=False), on)
    assert not cli_args.traces(Namespace(trace=False), off) and not cli_args.traces(Namespace(), off)
    enabled = []
    monkeypatch.setattr(hqa.tracking.runs, "enable_traces", lambda settings, opened: enabled.append(opened))
    cli_args.trace_questions(Namespace(trace=False), off, "quiet")
    cli_args.trace_questions(Namespace(trace=False), on, "traced")
    assert enabled == ["traced"]
