"""No import cycle in hqa/, between modules or between its packages (``scripts/check-imports``; function-level and
relative imports count)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
CHECKER = REPO / "scripts" / "check-imports"


def run_checker(package: Path, *ignore: str) -> subprocess.CompletedProcess:
    args = [a for name in ignore for a in ("--ignore-module-cycle-within", name)]
    return subprocess.run([sys.executable, str(CHECKER), str(package), *args], capture_output=True, text=True,
                          timeout=120)


def test_hqa_has_no_import_cycle():
    proc = run_checker(REPO / "hqa")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def failing_report(root: Path, files: dict[str, str]) -> str:
    """The checker's report on a package of ``files``, which must make it fail."""
    proc = run_checker(write(root, files))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stdout


def test_a_function_level_import_closing_a_cycle_fails(tmp_path):
    report = failing_report(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/one.py": "from pkg.b import two\n",
        "pkg/b/__init__.py": "",
        "pkg/b/two.py": "def f():\n    from ..a import one\n    return one\n",
        "pkg/c.py": "import pkg.a.one\n",
    })
    assert "module cycle: pkg.a.one -> pkg.b.two -> pkg.a.one" in report
    assert "package cycle: pkg.a -> pkg.b -> pkg.a" in report
    assert "pkg.c" not in report  # it imports into the cycle, it is not part of it


def test_a_package_cycle_without_a_module_cycle_fails(tmp_path):
    report = failing_report(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/one.py": "from pkg.b import two\n",
        "pkg/a/three.py": "",
        "pkg/b/__init__.py": "",
        "pkg/b/two.py": "",
        "pkg/b/four.py": "from . import five\nfrom pkg.a import three\n",
        "pkg/b/five.py": "",
    })
    assert "module cycle" not in report
    assert "package cycle: pkg.a -> pkg.b -> pkg.a" in report


def test_an_acyclic_package_and_the_exclusion(tmp_path):
    pkg = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\nimport json\n",
        "pkg/b.py": "from .c import thing\n",
        "pkg/c.py": "thing = 1\n",
        "pkg/old/__init__.py": "",
        "pkg/old/x.py": "from pkg.old import y\n",
        "pkg/old/y.py": "def f():\n    from pkg.old.x import f\n",
    })
    assert run_checker(pkg).returncode == 1
    proc = run_checker(pkg, "pkg.old")
    assert proc.returncode == 0, proc.stdout
    assert "no import cycle" in proc.stdout
