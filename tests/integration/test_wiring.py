"""Issue 25's wiring: a program answers with the toolbox it was given (no process-global lookup), program metadata
is read from the class, the ``hqa`` program name keeps working as ``humaniq`` with one deprecation line (CLI, build,
saved artifacts), and opening a compiled program to answer never imports the compile package."""

from __future__ import annotations

import json
import subprocess
import sys


def test_answering_with_the_shipped_program_never_imports_the_compile_package(built_pack):
    code = ("import sys, json; from pathlib import Path; from hqa.config import load_settings; "
            "from hqa.app import open_program; "
            f"s = load_settings(Path('/nonexistent-hqa.toml'), environ={{}}, paths_artifacts={str(built_pack)!r}); "
            "o = open_program(s, configure=False); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('hqa.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert "hqa.artifacts.store" in modules and "hqa.programs.simple" in modules
    assert not [m for m in modules if m.startswith("hqa.optimize")]


def test_the_cli_parser_imports_neither_dspy_nor_the_compile_package():
    """Building the parser (every command does, ``hqa ask`` and ``hqa --help`` included) and reading an ``ask`` line
    loads no DSPy and nothing of hqa.optimize: the optimizer names are read only when ``--optimizer`` is checked or
    listed; of the command modules (hqa/cli/registry.py) only ``ask``'s is imported."""
    code = ("import sys, json; from hqa.cli.entry import build_parser; from hqa.cli.registry import COMMANDS; "
            "build_parser().parse_args(['ask', 'Who wrote Dune?']); "
            "print(json.dumps(sorted(m for m in sys.modules if m == 'dspy' or m.startswith('hqa.optimize')))); "
            "print(json.dumps([c.module for c in COMMANDS.values() if c.module in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-2]) == []
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["hqa.cli.ask"]  # no other command's module
    bad = subprocess.run([sys.executable, "-m", "hqa.cli", "compile", "--optimizer", "nope"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr and "'dpp-human'" in bad.stderr
