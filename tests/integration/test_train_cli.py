"""``hqa train ranker`` end to end on the session pack: a few compmix questions through the program's own hop, the
arm's two files written where ``--out`` says, with its data checksums and command, and read back as a model."""

from __future__ import annotations

import json

from hqa.answering import ranker as learned
from hqa.cli.entry import main


def test_train_ranker_writes_an_arm_that_loads(built_pack, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(built_pack))
    monkeypatch.setenv("HQA_MODELS__RERANKER", "")  # the bi-encoder: its arm
    out = tmp_path / "arm"
    code = main(["train", "ranker", "--train-limit", "12", "--dev-limit", "8", "--rounds", "5", "--out", str(out),
                 "--target", "0.5", "--target-all", "0.5", "--json"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    meta = json.loads(printed.out)
    assert meta["arm"] == "bi-encoder" and meta["command"].startswith("hqa train ranker")
    written = json.loads((out / learned.META_FILE).read_text())
    assert 0 < written["trained_on"]["n"] and written["trained_on"]["files_sha256"]
    assert written["calibrated_on"]["spec"] == "compmix/dev" and 0 <= written["confidence"]["threshold"] <= 1
    assert learned.load_model(out).name.startswith("learned bi-encoder ")


def test_a_training_that_fails_leaves_the_arm_in_use_untouched(built_pack, tmp_path, monkeypatch, capsys):
    """The trees are checked and calibrated beside the folder, not in it: a failure after they are fitted (here the
    calibration) must not leave new trees, nor a provisional metadata that never answers, where programs read them."""
    from hqa.optimize import answer_ranker as ar

    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(built_pack))
    monkeypatch.setenv("HQA_MODELS__RERANKER", "")
    out = tmp_path / "arm"
    args = ["train", "ranker", "--train-limit", "12", "--dev-limit", "8", "--rounds", "5", "--out", str(out),
            "--target", "0.5", "--target-all", "0.5"]
    assert main(args) == 0
    before = {f.name: f.read_bytes() for f in out.iterdir()}

    def broken(*_a, **_k):
        raise RuntimeError("calibration failed")

    monkeypatch.setattr(ar, "calibrate", broken)
    assert main([*args, "--rounds", "7"]) != 0
    capsys.readouterr()
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before  # no new trees, no scratch folder left
    assert learned.load_model(out).meta["confidence"]["threshold"] < 1.0
