"""README's ``bash`` and ``python`` blocks run as written, each in a fresh shell or interpreter in a temp copy of the
checkout; a block that needs the network, a long LM run, a server or files the reader brings is listed in
:data:`NOT_RUN` (by its first line) with the reason, and a block neither run nor listed fails the suite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prockit import clean_env


REPO = Path(__file__).resolve().parent.parent.parent
BLOCK_RE = re.compile(r"^```(bash|python)\n(.*?)^```", re.M | re.S)

NOT_RUN = {  # first line of a README block → why this test does not run it
    "make demo": "installs the environment and runs the whole suite (make test)",
    '.venv/bin/hqa ask "Who is the author': "agent runs of up to 8 SmolLM2 steps each (tests/integration/test_live_programs.py)",
    "HQA_LM__CACHE=false hqa evaluate --dataset compmix/test:answerable": "four evaluations of compmix/test:answerable "
    "(both rankers, selective and always answering; the same arms LM-free: benchmarks/answer_ranker_arms.py)",
    "hqa compile --program humaniq --optimizer dpp-human --train": "a compile with the embedded LM",
    "import hqa": "loads the program the compile block above writes",
    "hqa compare --program humaniq": "a four-arm compare with the embedded LM",
    "hqa serve --load": "a server left running (tests/integration/test_serve*.py), and `open` is macOS's",
    "hqa batch questions.jsonl": "the reader's questions file and the compiled program of the compile block",
    "hqa compile --program humaniq --optimizer dpp-human --register": "a compile, then a model server left running",
    "hqa evaluate --program detllm": "5 DETLLM questions with the embedded LM",
    "hqa config set sources live": "Wikipedia, Wikidata and WDQS over the network, and an OpenAI key",
    "python benchmarks/gen_graph.py": "Wikidata dumps the reader downloads (latest-all.json.gz, psgs_w100.tsv)",
    "VIRTUOSO_PASSWORD=dba": "a Virtuoso server",
    "hqa study studies/readme.toml": "16 questions of four programs with the embedded LM (22 min here)",
    "export OPENAI_API_KEY=...\nhqa study": "an OpenAI key, and the Mintaka and QALD files from the network",
    "python -m llama_cpp.server --model": "a model server left in the background (tests/integration/"
                                          "test_llama_server_*.py start the same server and ask through it)",
    "hqa data pull mintaka/test": "downloads from GitHub (tests/integration/test_data_store.py pulls from a loopback origin)",
    "hqa evaluate --program simple --dataset compmix/test --engine ray": "compmix/test with the embedded LM on two Ray "
    "workers (tests/integration/test_ray_engine.py runs the engine against the loopback LM)",
    "RAY_ADDRESS=head-node:6379": "a Ray cluster",
    "for i in 1 2 3; do hqa evaluate": "90 closedbook questions with the embedded LM (tests/integration/test_shards.py "
    "shards and merges against the loopback LM)",
    "score = mlflow.pyfunc.spark_udf": "a Spark session, a registered model and an LM server "
    "(tests/integration/test_spark_udf.py)",
}


def blocks() -> list[tuple[str, str]]:
    return [(lang, code) for lang, code in BLOCK_RE.findall((REPO / "README.md").read_text(encoding="utf-8"))]


def listed(code: str) -> str | None:
    return next((first for first in NOT_RUN if code.startswith(first)), None)


def run_block(lang: str, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a fresh ``bash -e`` or interpreter in ``cwd``, with this checkout's hqa first on the path."""
    env = clean_env(PYTHONPATH=str(cwd), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                    HF_HUB_OFFLINE="1")
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = ["bash", "-e", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
    return subprocess.run(cmd, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture()
def checkout(tmp_path) -> Path:
    """A copy of the checkout's tracked files (as they are in the work tree), without artifacts or caches."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    dest = tmp_path / "hqa-checkout"
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def test_every_block_is_run_or_listed_with_its_reason():
    found = blocks()
    assert len(found) >= 15
    ran = {code.splitlines()[0] for _lang, code in found if not listed(code)}
    assert ran == {"hqa config show                                   # effective settings",
                   "import mlflow"}, "a README block is neither run by this file nor listed in NOT_RUN"
    stale = [first for first in NOT_RUN if not any(code.startswith(first) for _lang, code in found)]
    assert not stale, f"NOT_RUN names blocks README no longer has: {stale}"


def the_block(first: str) -> tuple[str, str]:
    (block,) = [(lang, code) for lang, code in blocks() if code.startswith(first)]
    return block


def test_config_block_runs_as_written(checkout):
    lang, code = the_block("hqa config show")
    proc = run_block(lang, code, checkout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = (checkout / "hqa.toml").read_text(encoding="utf-8")
    for line in ('provider = "openai_compatible"', 'model = "gpt-4o-mini"', 'kind = "jsonl"',
                 'endpoint = "https://query.wikidata.org/sparql"'):
        assert line in written


@pytest.mark.real_lm
def test_pyfunc_block_runs_as_written(checkout):
    """The registered model the compile block would make (``models:/hqa@champion`` in the checkout's default store),
    made here from a closed-book program; the block then loads and predicts with it as written."""
    from hqa.config import load_settings
    from hqa.optimize import mlflow_model
    from hqa.tracking import registry as tracking
    from hqa.artifacts.store import save_artifact
    from hqa.programs.closedbook import ClosedBook

    art = checkout / "artifacts"
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(art))
    dest = save_artifact(ClosedBook(), art / "programs" / "cb", {"program": "closedbook", "program_kwargs": {}})
    with tracking.run(settings, "compile:cb", autolog=False):
        assert mlflow_model.log_program(dest, settings=settings, register="hqa") is None
    tracking.set_alias(settings, "hqa", 1, "champion")
    lang, code = the_block("import mlflow")
    proc = run_block(lang, code + "\nprint(model.predict({'question': 'Who wrote Animal Farm?'}).to_json())\n",
                     checkout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"question":{"0":"Who wrote Animal Farm?"}' in proc.stdout and '"trace"' in proc.stdout
    assert not (checkout / "mlflow.db").exists() and not (checkout / "mlruns").exists()  # nothing left in the cwd
