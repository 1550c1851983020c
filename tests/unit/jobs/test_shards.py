"""The shard slice and the checks of ``hqa runs merge`` (hqa.jobs.shards) over shard folders written here: every
difference, missing or repeated shard, duplicate question and gap is named, and nothing is written then."""

from __future__ import annotations

import json

import pytest
from rowkit import ROW

from hqa.errors import ConfigError, DataError
from hqa.jobs.shards import Shard, merge_runs
from hqa.schemas.run_folder import RunFolder

IDS = [f"q{i}" for i in range(7)]


def test_the_slice_covers_every_question_once():
    for count in (1, 2, 3, 7, 9):
        taken = [x for i in range(1, count + 1) for x in Shard(i, count).take(IDS)]
        assert sorted(taken) == sorted(IDS) and len(taken) == len(IDS)
    assert Shard(2, 3).take(IDS) == ["q1", "q4"]
    assert Shard.parse(" 2 / 3 ") == Shard(2, 3) and str(Shard(2, 3)) == "2/3" and Shard(2, 3).label == "shard2of3"


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0", ""])
def test_a_bad_shard_is_refused(text):
    with pytest.raises(ConfigError, match="--shard"):
        Shard.parse(text)


def _shard(folder, index, count=3, ids=None, rows=None, program="closedbook", lm="standin", limit=7, total=7):
    ids = Shard(index, count).take(IDS) if ids is None else ids
    rf = RunFolder(folder)
    folder.mkdir(parents=True)
    answered = ids if rows is None else rows
    rf.rows_path.write_text("".join(json.dumps({**ROW, "id": i, "answer": f"a-{i}"}) + "\n" for i in answered))
    rf.tag_path.write_text(json.dumps({"program": program, "dataset": "compmix/test", "shard": f"{index}/{count}"}))
    rf.run_info.write_text(json.dumps({"program": program, "label": program, "dataset": "compmix/test",
                                       "limit": limit, "lm": {"model": lm}, "seed": 0, "arm": "none",
                                       "command": f"hqa evaluate --program {program} --shard {index}/{count}",
                                       "shard": {"index": index, "count": count, "total": total, "ids": ids}}))
    return folder


def _merge_fails(tmp_path, folders, *patterns):
    out = tmp_path / "merged"
    with pytest.raises(DataError) as err:
        merge_runs(folders, out)
    for pattern in patterns:
        assert pattern in str(err.value), str(err.value)
    assert not (out / "predictions.jsonl").exists()


def test_merge_writes_the_rows_in_the_dataset_order(tmp_path):
    folders = [_shard(tmp_path / f"s{i}", i) for i in (3, 1, 2)]
    done = merge_runs(folders, tmp_path / "merged")
    rows = RunFolder(tmp_path / "merged").rows()
    assert [r["id"] for r in rows] == IDS and done["n"] == 7
    info = RunFolder(tmp_path / "merged").info()
    assert info["command"] == "hqa evaluate --program closedbook" and "shard" not in info
    assert RunFolder(tmp_path / "merged").tag() == {"program": "closedbook", "dataset": "compmix/test"}


def test_a_missing_and_a_repeated_shard_are_named(tmp_path):
    a, b = _shard(tmp_path / "a", 1), _shard(tmp_path / "b", 1)
    _merge_fails(tmp_path, [a, b], "shard 1/3 is given twice", "shards 2/3, 3/3 missing")


def test_another_program_lm_or_limit_is_named(tmp_path):
    base = [_shard(tmp_path / "s1", 1), _shard(tmp_path / "s2", 2)]
    _merge_fails(tmp_path, [*base, _shard(tmp_path / "p", 3, program="cot")], "a run of", "program")
    _merge_fails(tmp_path, [*base, _shard(tmp_path / "l", 3, lm="other")], 'has lm {"model": "other"}')
    _merge_fails(tmp_path, [*base, _shard(tmp_path / "n", 3, limit=8, total=8)], "has limit 8",
                 "datasets of different sizes")


def test_a_duplicate_question_and_a_gap_are_named(tmp_path):
    one = _shard(tmp_path / "s1", 1, rows=["q0", "q3", "q6", "q1"])  # q1 is shard 2's
    two = _shard(tmp_path / "s2", 2)
    three = _shard(tmp_path / "s3", 3, rows=["q2"])  # q5 not answered yet
    _merge_fails(tmp_path, [one, two, three], "1 question answered in two shards: q1", "1 of shard 3/3's 2 questions "
                 "have no row", "q5")


def test_a_folder_that_is_no_shard_is_refused(tmp_path):
    folder = _shard(tmp_path / "s1", 1)
    info = json.loads(RunFolder(folder).run_info.read_text())
    del info["shard"]
    RunFolder(folder).run_info.write_text(json.dumps(info))
    _merge_fails(tmp_path, [folder], "is not a shard")
