"""The argument groups ``hqa`` commands share, each declared once, and what they resolve to (the settings, the
program, whether questions are traced)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hqa.errors import ConfigError
from hqa.registry import kind_names


# -- parser classes --------------------------------------------------------------------------------------------
class Help(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default (unless its help already says it, or there is none to show)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or isinstance(action.default, bool) or action.default in ("", argparse.SUPPRESS) \
                or "default" in text.lower() \
                or not action.option_strings:
            return text
        return super()._get_help_string(action)


def add_shared(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name (``hqa -v ask …`` = ``hqa ask -v …``); a
    subcommand's copies default to SUPPRESS so they never overwrite what was given before the subcommand."""
    kw = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument("--config", help="TOML config file (default: $HQA_CONFIG or ./hqa.toml)", **kw)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error", **kw)
    parser.add_argument("-v", "--verbose", action="count", help="also show the libraries' warnings (each once); -vv: "
                        "everything from INFO up (default: hqa's own warnings only)",
                        **(kw or {"default": 0}))


class Parser(argparse.ArgumentParser):
    """Every ``hqa`` (sub)command's parser: defaults in ``--help``, and the shared options (:func:`add_shared`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", Help)
        super().__init__(*args, **kwargs)
        add_shared(self, suppress=True)


def at_least_one(text: str) -> int:
    """argparse type of counts such as ``--threads``: an integer >= 1 (argparse turns the error into one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# -- program, LM overrides, budget -----------------------------------------------------------------------------
def program_names() -> list[str]:
    """What ``--program`` accepts (hqa.programs' names, no DSPy imported); a deprecated alias keeps working (one line
    says so)."""
    from hqa.programs import ALIASES, PROGRAMS

    return sorted([*PROGRAMS, *ALIASES])


def add_program_args(sp: argparse.ArgumentParser, compiling: bool = False) -> None:
    """The options of every command that answers with a program, the same everywhere.  ``compiling``: the program is
    the one to compile (humaniq unless named; no ``--load`` or ``--trace``)."""
    names = program_names()
    if compiling:
        sp.add_argument("--program", default="humaniq", choices=names, metavar="PROGRAM",
                        help="the program to compile, one of: %(choices)s")
    else:
        sp.add_argument("--program", choices=names, metavar="PROGRAM",
                        help="which program answers, one of: %(choices)s (default: the compiled default program "
                             "shipped with hqa)")
        sp.add_argument("--load", help="a compiled program folder (artifacts/programs/<name>), models:/NAME/VERSION "
                                       "or models:/NAME@ALIAS")
        sp.add_argument("--trace", action="store_true", help="log every question as an MLflow trace (LM and tool "
                                                             "calls as spans; the same as tracking.traces = true)")
    sp.add_argument("--program-kwargs", help="JSON object of program constructor arguments, e.g. '{\"choices\": 3}'")
    add_lm_overrides(sp)


def add_lm_overrides(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--lm", choices=["local", "openai", "openai_compatible"], help="override lm.provider")
    sp.add_argument("--model", help="override lm.model")
    sp.add_argument("--api-base", dest="api_base", help="override lm.api_base")
    sp.add_argument("--kg", choices=kind_names("kg"), help="override kg.kind")
    sp.add_argument("--endpoint", help="override kg.endpoint (SPARQL HTTP endpoint)")


def add_budget_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--max-lm-calls", type=int, help="stop once this run's questions made this many LM requests; "
                                                     "the rows so far are kept and a rerun resumes")
    sp.add_argument("--max-cost", type=float, metavar="DOLLARS",
                    help="stop once this run's questions cost this many US dollars at the LM's price in "
                         "hqa/data/prices.json (the embedded model costs 0; an unlisted model is refused)")
    sp.add_argument("--no-estimate", action="store_true",
                    help="do not print the estimate of LM calls, tokens, cost and time before the run")


def add_engine_args(sp: argparse.ArgumentParser) -> None:
    """Where a batch job's questions are answered (hqa.jobs.engine.make_engine): threads in this process, or Ray."""
    sp.add_argument("--engine", choices=["threads", "ray"], default="threads",
                    help="threads: --threads questions at once in this process; ray: Ray actors in other processes "
                         "or machines (pip install 'hqa[ray]'), --threads questions in flight across them")
    sp.add_argument("--workers", type=at_least_one, help="with --engine ray: worker processes (default: one per CPU "
                                                         "of the Ray cluster, or of this machine)")
    sp.add_argument("--ray-address", dest="ray_address", help="with --engine ray: a running Ray cluster (default "
                                                              "$RAY_ADDRESS, else a local Ray started for the run)")


def engine_args(args: argparse.Namespace) -> dict:
    """``--engine``, ``--workers``, ``--ray-address`` as :func:`hqa.jobs.engine.make_engine`'s keywords (checked: the
    last two go with ``--engine ray``)."""
    from hqa.errors import ConfigError

    engine = getattr(args, "engine", "threads") or "threads"
    workers, address = getattr(args, "workers", None), getattr(args, "ray_address", None)
    if engine != "ray" and (workers is not None or address):
        raise ConfigError("--workers and --ray-address go with --engine ray")
    return {"engine": engine, "workers": workers, "ray_address": address}


# -- what the arguments resolve to -----------------------------------------------------------------------------
def settings(args: argparse.Namespace):
    """The settings of this command: ``--config`` (which must exist) with the LM / KG overrides on top."""
    from hqa.config import load_settings

    path = Path(args.config) if getattr(args, "config", None) else None
    if path is not None and not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    return load_settings(path, lm_provider=getattr(args, "lm", None), lm_model=getattr(args, "model", None),
                         lm_api_base=getattr(args, "api_base", None), kg_kind=getattr(args, "kg", None),
                         kg_endpoint=getattr(args, "endpoint", None))


def program_kwargs(args: argparse.Namespace) -> dict:
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


def warn(text: str) -> None:
    """A program's load warning, one line on stderr, the same way for every command."""
    print(f"hqa: warning: {text}", file=sys.stderr)


def open_program(args: argparse.Namespace, settings, benchmark: str | None = None):
    """The program a command answers with (``--program``, ``--load`` or the shipped default), its load warnings
    printed (:func:`warn`)."""
    from hqa.app import open_program as open_

    opened = open_(settings, program=None if args.load else args.program, load=args.load,
                   program_kwargs=program_kwargs(args), benchmark=benchmark)
    for warning in opened.warnings:
        warn(warning)
    return opened


def traces(args: argparse.Namespace, settings) -> bool:
    """Whether every question is an MLflow trace: ``--trace`` or ``tracking.traces = true``."""
    return bool(getattr(args, "trace", False) or settings.tracking.traces)


def trace_questions(args: argparse.Namespace, settings, opened) -> None:
    """With :func:`traces`: every question ``opened`` answers an MLflow trace in the configured tracking store."""
    if traces(args, settings):
        from hqa.tracking.runs import enable_traces

        enable_traces(settings, opened)
