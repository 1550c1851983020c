"""A researcher's machine: a fresh copy of the checkout with no ../shared beside it and no mirror, the datasets'
origins on a loopback server laid out as raw.githubusercontent.com.  The demo's data path runs as scripts/setup and
`make demo` run it — pull what the pack needs, build the pack, answer — and fetches nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hqa.data import store
from tests.datakit import Origin, serve_registry

REPO = Path(__file__).resolve().parent.parent
MIRROR = REPO.parent / "shared" / "data"  # only the loopback origin's content comes from here


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


@pytest.mark.server
@pytest.mark.real_lm
def test_demo_on_a_fresh_clone_from_the_origins(tmp_path):
    clone = _fresh_copy(tmp_path / "home" / "hqa")
    assert not (clone.parent / "shared").exists()
    reg = store._registry()
    demo = [d for d in reg["datasets"] if d["name"] in reg["pack_inputs"]]
    contents = {f["file"]: (MIRROR / f["file"]).read_bytes() for d in demo for f in d["files"]}
    data = tmp_path / "user-cache" / "hqa" / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(PYTHONPATH=str(clone), HQA_CACHE_DIR=str(tmp_path / "user-cache" / "hqa"))
    # the ONNX export of the packaged MiniLM is a machine-wide derived file: reuse this machine's instead of exporting
    models = Path(os.environ.get("HQA_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                  / "hqa") / "models"
    if models.is_dir():
        (tmp_path / "user-cache" / "hqa").mkdir(parents=True)
        os.symlink(models, tmp_path / "user-cache" / "hqa" / "models")

    def hqa(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "hqa.cli", *args], cwd=clone, env=env, capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc

    with Origin() as origin:
        serve_registry(origin, {"datasets": demo}, contents)
        env["HQA_DATA_ORIGIN_GITHUB"] = origin.base
        pulled = hqa("data", "pull", "demo", "--quiet")
        assert "from their origin" in pulled.stdout and f"{len(contents)} from their origin" in pulled.stdout
        assert len(origin.requests) == len(contents)
        hqa("pack", "build", "--quiet", "--no-leads")
        listing = json.loads(hqa("data", "list", "--json").stdout)
        answer = hqa("ask", "--json", "Who is the author of Animal Farm?")
    assert listing["data_dir"] == str(data)  # the documented default: the user cache
    present = {r["name"] for r in listing["datasets"] if r["present"]}
    assert present == set(reg["pack_inputs"])  # the pack's coverage measurement fetched no benchmark
    manifest = json.loads((clone / "artifacts" / "pack" / "manifest.json").read_text())
    assert all("not_pulled" in v for v in manifest["coverage"].values())
    sources = json.loads((clone / "artifacts" / "pack" / "world.json").read_text())["sources"]
    assert sources and all(s["path"].startswith(str(data)) for s in sources)  # built from the pulled files
    out = json.loads(answer.stdout)
    assert isinstance(out["answer"], str) and out["answer"].strip()
