"""Tests for hqa.data.datasets: the real data (counts, spot checks; from the data directory, filled from the mirror
here), fixture files in the origins' formats, and broken files (DataError messages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures" / "data"


# ------------------------------------------------------------------------------------------ splitting


@pytest.mark.real_lm
def test_evaluate_reads_pulled_mintaka_test_and_qald9plus_wikidata(tmp_path: Path) -> None:
    """`hqa evaluate --dataset mintaka/test` and `--dataset qald9plus-wikidata` run from files in the data directory
    (here the fixtures, laid out as `hqa data pull` lays out the released files)."""
    import os
    import subprocess
    import sys

    data = tmp_path / "data"
    for rel, fixture in (("mintaka/mintaka_test.json", "mintaka_test.json"),
                         ("qald9plus/qald_9_plus_test_wikidata.json", "qald_9_plus_test_wikidata.json")):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_bytes((FIXTURES / fixture).read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parent.parent.parent), HQA_PATHS__DATA=str(data),
               HQA_PATHS__ARTIFACTS=str(tmp_path / "art"))
    for spec, ids in (("mintaka/test", ["mintaka:fx000001", "mintaka:fx000002"]),
                      ("qald9plus-wikidata", ["qald9plus-wikidata:901", "qald9plus-wikidata:902"])):
        out = tmp_path / spec.replace("/", "-")
        proc = subprocess.run([sys.executable, "-m", "hqa.cli", "evaluate", "--program", "closedbook", "--dataset",
                               spec, "--limit", "2", "--out", str(out)], capture_output=True, text=True, cwd=tmp_path,
                              env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert sorted(r["id"] for r in rows) == ids
        assert all(r["gold"] for r in rows)
