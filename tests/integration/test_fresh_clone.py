"""A researcher's machine: a fresh copy of the checkout with no ../shared beside it and no mirror, the datasets'
origins on a loopback server laid out as raw.githubusercontent.com.  ``make demo`` runs as written: scripts/setup
pulls what the knowledge pack needs from the origins, builds the pack and its dense index, and the demo answers;
nothing else is fetched.

The install step is the one part not repeated: a fresh virtualenv of the full stack takes tens of minutes here, so
the copy's ``.venv`` is a thin one over this machine's installed environment, stamped as installed for the copy's
pyproject.toml and scripts/setup (the stamp scripts/setup itself checks).  The pack is built with
``HQA_PACK_ARGS=--no-leads`` (the recorded sources only: embedding 10k Wikipedia leads takes minutes)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hqa.data import store
from tests.datakit import Origin, serve_registry

REPO = Path(__file__).resolve().parent.parent.parent


def _fresh_copy(dest: Path) -> Path:
    """The files a clone of this checkout has (tracked + new, not ignored), copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _thin_venv(clone: Path) -> Path:
    """``clone/.venv`` running this interpreter with the copy's package first on the path, stamped as installed."""
    venv = clone / ".venv"
    (venv / "bin").mkdir(parents=True)
    for name, body in (("python", f'exec {sys.executable} "$@"'), ("hqa", f'exec {sys.executable} -m hqa.cli "$@"')):
        (venv / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
        (venv / "bin" / name).chmod(0o755)
    (venv / "bin" / "activate").write_text(f'export PATH="{venv}/bin:$PATH" PYTHONPATH="{clone}"\n')
    stamp = hashlib.sha256((clone / "pyproject.toml").read_bytes() + (clone / "scripts" / "setup").read_bytes())
    (venv / ".hqa-installed").write_text(stamp.hexdigest()[:16] + "\n")
    return venv


@pytest.mark.server
@pytest.mark.real_lm
def test_make_demo_on_a_fresh_clone_from_the_origins(tmp_path):
    clone = _fresh_copy(tmp_path / "home" / "hqa")
    assert not (clone.parent / "shared").exists()
    _thin_venv(clone)
    reg = store._registry()
    demo = [d for d in reg["datasets"] if d["name"] in reg["pack_inputs"]]
    # the loopback origin serves the real files, as this session's data directory has them
    contents = {f["file"]: store.require(f["file"]).read_bytes() for d in demo for f in d["files"]}
    cache = tmp_path / "user-cache" / "hqa"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(HQA_CACHE_DIR=str(cache), HQA_PACK_ARGS="--no-leads", PYTHONPATH=str(clone))
    # the ONNX export of the packaged MiniLM is a machine-wide derived file: reuse this machine's, not the data
    models = Path(os.environ.get("HQA_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                  / "hqa") / "models"
    cache.mkdir(parents=True)
    if models.is_dir():
        os.symlink(models, cache / "models")

    with Origin() as origin:
        serve_registry(origin, {"datasets": demo}, contents)
        env["HQA_DATA_ORIGIN_GITHUB"] = origin.base
        proc = subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert sorted(p for p, _r, _t in origin.requests) == sorted(  # each of the pack's files fetched once
            f"/{d['repo']}/{d['commit']}/{f['path']}" for d in demo for f in d["files"])
    assert "knowledge pack built in artifacts/pack" in proc.stdout
    assert "from their origin" in proc.stdout  # hqa data pull demo's summary line
    answers = [line for line in proc.stdout.splitlines() if line.startswith("A: ")]  # the demo's hqa ask
    assert len(answers) == 1 and answers[0][3:].strip() and "Q: Who is the author of Animal Farm?" in proc.stdout
    listing = json.loads(subprocess.run([sys.executable, "-m", "hqa.cli", "data", "list", "--json"], cwd=clone,
                                        env=env, capture_output=True, text=True, check=True).stdout)
    assert listing["data_dir"] == str(cache / "data")  # the documented default: the user cache
    assert listing["mirror"] is None
    present = {r["name"] for r in listing["datasets"] if r["present"]}
    assert present == set(reg["pack_inputs"])  # the pack's coverage measurement fetched no benchmark
    manifest = json.loads((clone / "artifacts" / "pack" / "manifest.json").read_text())
    assert all("not_pulled" in v for v in manifest["coverage"].values())
    sources = json.loads((clone / "artifacts" / "pack" / "world.json").read_text())["sources"]
    assert sources and all(s["path"].startswith(str(cache / "data")) for s in sources)  # built from the pulled files
