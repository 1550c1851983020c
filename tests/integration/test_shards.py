"""``hqa evaluate --shard i/N`` and ``hqa runs merge`` (hqa.jobs.shards, issue 55) through the CLI against the
loopback LM stand-in: three shards merged give one run's rows, report and run-info; the merged folder resumes as the
whole run; a shard missing is named."""

from __future__ import annotations

import json

import pytest

from hqa.cli.entry import main


@pytest.fixture()
def env(monkeypatch, entity_lm, built_pack, tmp_path):
    for key, value in {"HQA_LM__PROVIDER": "openai_compatible", "HQA_LM__API_BASE": entity_lm.api_base,
                       "HQA_LM__MODEL": "standin", "HQA_LM__CACHE": "false", "HQA_PATHS__ARTIFACTS": str(built_pack),
                       "HQA_TRACKING__URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}.items():
        monkeypatch.setenv(key, value)


def _evaluate(out, *extra):
    args = ["evaluate", "--program", "closedbook", "--dataset", "compmix/test", "--limit", "7", "--no-estimate",
            "--out", str(out), *extra]
    assert main(args) == 0


def _without_timing(value):
    """A report without what differs between two runs over the same answers: seconds per question."""
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if "seconds" not in k}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def test_shards_merged_equal_one_run(env, tmp_path, capsys):
    whole = tmp_path / "whole"
    _evaluate(whole)  # one thread: the rows in the dataset's order
    shards = [tmp_path / f"shard{i}" for i in (1, 2, 3)]
    for i, folder in enumerate(shards, 1):
        _evaluate(folder, "--shard", f"{i}/3", "--threads", "2")
    sizes = [len((f / "predictions.jsonl").read_text().splitlines()) for f in shards]
    assert sizes == [3, 2, 2]  # positions 0,3,6 / 1,4 / 2,5
    merged = tmp_path / "merged"
    assert main(["runs", "merge", *map(str, reversed(shards)), "--out", str(merged)]) == 0
    assert "merged 3 shards, 7 questions" in capsys.readouterr().out

    one = [json.loads(line) for line in (whole / "predictions.jsonl").read_text().splitlines()]
    joined = [json.loads(line) for line in (merged / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in joined] == [r["id"] for r in one]  # every question once, in the dataset's order
    for a, b in zip(one, joined):
        assert (a["answer"], a["scores"], a["demos"], a["lm_calls"]) == (b["answer"], b["scores"], b["demos"],
                                                                         b["lm_calls"])
    assert len({r["answer"] for r in joined}) > 1
    report_one = json.loads((whole / "summary.json").read_text())
    report_merged = json.loads((merged / "summary.json").read_text())
    assert _without_timing(report_merged) == _without_timing(report_one)
    info_one = json.loads((whole / "run-info.json").read_text())
    info_merged = json.loads((merged / "run-info.json").read_text())
    assert info_merged["command"] == info_one["command"] and "shard" not in info_merged
    assert info_merged["merged_from"] == [str(f) for f in shards]
    # the merged folder is the whole run's: evaluating the whole dataset into it resumes and asks nothing
    before = (merged / "predictions.jsonl").read_text()
    _evaluate(merged)
    assert (merged / "predictions.jsonl").read_text() == before


def test_a_missing_shard_is_named_and_nothing_is_written(env, tmp_path):
    shards = [tmp_path / f"shard{i}" for i in (1, 2)]
    for i, folder in zip((1, 3), shards):
        _evaluate(folder, "--shard", f"{i}/3")
    merged = tmp_path / "merged"
    assert main(["runs", "merge", *map(str, shards), "--out", str(merged)]) == 2
    assert not (merged / "predictions.jsonl").exists()


def test_a_shard_folder_is_resumed_only_by_its_shard(env, tmp_path, capsys):
    folder = tmp_path / "shard1"
    _evaluate(folder, "--shard", "1/3")
    assert main(["evaluate", "--program", "closedbook", "--dataset", "compmix/test", "--limit", "7",
                 "--no-estimate", "--out", str(folder), "--shard", "2/3"]) != 0
    assert "shard 1/3" in capsys.readouterr().err
