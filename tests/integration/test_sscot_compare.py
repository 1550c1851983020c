"""``hqa compare --vary``: program-kwargs arms, e.g. SS-CoT Table 3's knowledge-source orders in one command."""

from __future__ import annotations


from hqa.schemas.run_folder import read_rows

CHAIN = "Gabon >> capital >> #1; Gabon >> continent >> #2; final answer: #1"


def test_compare_vary_runs_one_arm_per_source_order(cli, capsys, tmp_path):  # noqa: F811
    cli.lm.fixed["reasoning_chain"] = CHAIN
    out = tmp_path / "t3"
    code = cli("compare", "--program", "sscot", "--program-kwargs", '{"n_samples": 1}', "--vary",
               "sources=kg,model;model;kg", "--dev", "humaniq-compmix", "--dev-limit", "2", "--metric", "em",
               "--out", str(out))
    printed = capsys.readouterr().out
    assert code == 0
    assert "| sources | EM | F1 |" in printed
    for arm in ("kg,model", "model", "kg"):
        assert f"| {arm} | 0.00 | " in printed
    rows = {arm: read_rows(out / f"{arm.replace(',', '_')}.jsonl") for arm in ("kg,model", "model", "kg")}
    for arm, got in rows.items():
        assert len(got) == 2
        for r in got:
            assert r["trace"]["sources"] == arm.split(",")
            assert [s["step"] for s in r["trace"]["steps"]] == ["parse", "vote", *arm.split(","), "answer"]
    assert {r["answer"] for r in rows["kg"]} == {"Libreville"}  # Alg. 1 on the pack, no model step
    assert {f["via"] for r in rows["model"] for f in r["trace"]["fills"]} <= {"lm"}
    assert all(r["answer"] != "Libreville" for r in rows["model"])

    assert cli("compare", "--program", "sscot", "--vary", "sources=kg,web", "--dev-limit", "1") == 2
    assert "sources must be distinct names" in capsys.readouterr().err
    assert cli("compare", "--program", "sscot", "--vary", "bogus=1;2", "--dev-limit", "1") == 2
    assert "unknown field 'program_kwargs.bogus'" in capsys.readouterr().err
