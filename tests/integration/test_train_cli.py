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
