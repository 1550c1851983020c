"""User paths of the CLI, run in-process: ``hqa compile`` → ``ask --load`` / ``evaluate --load`` → ``runs``,
``hqa compare``, ``evaluate --fresh``, resuming a folder another program or dataset wrote, duplicate ids.

The LM is :class:`conftest.DemoSensitiveLM` (installed in place of the configured one), so a loaded program that
lost its demos answers differently from the compiled one; the knowledge pack is the session's real one.
"""

from __future__ import annotations

import json
from pathlib import Path


from hqa.schemas.run_folder import read_rows


def compile_cb(cli, capsys, name="cb"):
    code = cli("compile", "--program", "closedbook", "--optimizer", "bootstrap", "--train", "compmix/dev",
               "--train-limit", "4", "--dev", "humaniq-compmix", "--dev-limit", "2", "--metric", "em", "--name", name)
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out[out.index("{"):])


def test_compile_then_ask_and_evaluate_load_answer_as_the_compiled_program(cli, capsys, tmp_path):
    result = compile_cb(cli, capsys)
    art = Path(result["artifact"])
    compiled_rows = {r["question"]: r["answer"] for r in read_rows(Path(result["predictions"]))}
    assert len(compiled_rows) == 2 and all(a.startswith("d") for a in compiled_rows.values())

    q = next(iter(compiled_rows))
    assert cli("ask", "--load", str(art), "--json", q) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == compiled_rows[q]

    out = tmp_path / "eval-load"
    assert cli("evaluate", "--load", str(art), "--dataset", "humaniq-compmix", "--limit", "2", "--out", str(out)) == 0
    assert "summary.md" in capsys.readouterr().out
    assert {r["question"]: r["answer"] for r in read_rows(out / "predictions.jsonl")} == compiled_rows
    # the zero-shot program answers otherwise: evaluate --load really ran the compiled demos
    zero = tmp_path / "eval-zero"
    assert cli("evaluate", "--program", "closedbook", "--dataset", "humaniq-compmix", "--limit", "2",
               "--out", str(zero)) == 0
    capsys.readouterr()
    zero_rows = {r["question"]: r["answer"] for r in read_rows(zero / "predictions.jsonl")}
    assert all(zero_rows[q] != a for q, a in compiled_rows.items())

    # hqa runs lists the compile run with its dev metrics and the compiled program
    assert cli("runs") == 0
    listing = capsys.readouterr().out
    assert "compile:cb" in listing and str(art) in listing and "closedbook / bootstrap" in listing
    assert cli("runs", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in data["programs"]] == ["cb"]
    assert any(r["run_id"] == result["run_id"] and r["name"] == "compile:cb" for r in data["runs"])


def test_compare_writes_a_row_per_arm(cli, capsys, tmp_path):
    out = tmp_path / "cmp"
    code = cli("compare", "--program", "closedbook", "--arms", "none,bootstrap", "--train", "compmix/dev",
               "--train-limit", "4", "--dev", "humaniq-compmix", "--dev-limit", "2", "--metric", "em",
               "--out", str(out))
    printed = capsys.readouterr().out
    assert code == 0 and "| none |" in printed and "| bootstrap |" in printed
    arms = {arm: {r["id"]: r["answer"] for r in read_rows(out / f"{arm}.jsonl")} for arm in ("none", "bootstrap")}
    assert len(arms["none"]) == 2 and all(arms["none"][i] != arms["bootstrap"][i] for i in arms["none"])
    assert cli("compare", "--program", "closedbook", "--arms", "none,magic", "--dev-limit", "1") == 2
    assert "unknown optimizer 'magic'" in capsys.readouterr().err


def test_resuming_a_folder_of_another_program_or_dataset_is_refused_unless_fresh(cli, capsys, tmp_path):
    out = tmp_path / "ev"
    args = ("--dataset", "humaniq-compmix", "--limit", "2", "--out", str(out))
    assert cli("evaluate", "--program", "closedbook", *args) == 0
    capsys.readouterr()
    rows = (out / "predictions.jsonl").read_text()
    assert len(rows.splitlines()) == 2

    assert cli("evaluate", "--program", "cot", *args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hqa: error:") and "program closedbook" in err and "--fresh" in err
    assert len(err.splitlines()) == 1
    assert (out / "predictions.jsonl").read_text() == rows  # nothing lost, nothing mixed in

    assert cli("evaluate", "--program", "closedbook", "--dataset", "compmix/dev", "--limit", "2",
               "--out", str(out)) == 2
    assert "dataset humaniq-compmix" in capsys.readouterr().err
    assert (out / "predictions.jsonl").read_text() == rows

    # the same program and dataset resume: nothing is asked again
    calls = len(cli.lm.prompts)
    assert cli("evaluate", "--program", "closedbook", *args) == 0
    capsys.readouterr()
    assert len(cli.lm.prompts) == calls and (out / "predictions.jsonl").read_text() == rows

    # --fresh discards the old rows and records the new program
    assert cli("evaluate", "--program", "cot", "--fresh", *args) == 0
    capsys.readouterr()
    fresh = read_rows(out / "predictions.jsonl")
    assert len(fresh) == 2 and all(r["trace"]["program"] == "cot" for r in fresh)
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 2


def test_resuming_an_untagged_folder_of_another_dataset_is_refused(cli, capsys, tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    row = {"id": "x1", "question": "q", "dataset": "bamboogle", "answer": "a", "error": None,
           "scores": {"em": 0.0}}
    (out / "predictions.jsonl").write_text(json.dumps(row) + "\n")
    assert cli("evaluate", "--program", "closedbook", "--dataset", "humaniq-compmix", "--limit", "1",
               "--out", str(out)) == 2
    assert "dataset bamboogle" in capsys.readouterr().err
    assert (out / "predictions.jsonl").read_text() == json.dumps(row) + "\n"


def test_evaluate_is_an_mlflow_run_with_params_metrics_and_report(cli, capsys, tmp_path):
    import mlflow

    out = tmp_path / "ev-mlflow"
    assert cli("evaluate", "--program", "closedbook", "--dataset", "humaniq-compmix", "--limit", "2",
               "--out", str(out)) == 0
    printed = capsys.readouterr().out
    run_id = printed.rsplit("mlflow run: ", 1)[1].split()[0]
    mlflow.set_tracking_uri(f"sqlite:///{cli.art / 'mlflow.db'}")
    run = mlflow.get_run(run_id)
    assert run.data.tags["job"] == "evaluate" and run.info.status == "FINISHED"
    assert run.data.params["program"] == "closedbook" and run.data.params["dataset"] == "humaniq-compmix"
    summary = json.loads((out / "summary.json").read_text())
    assert run.data.metrics["eval_n"] == 2 == summary["n"]
    assert run.data.metrics["eval_recall"] == summary["metrics"]["recall"]
    logged = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id, "evaluation")}
    assert {"evaluation/summary.md", "evaluation/summary.json", "evaluation/predictions.jsonl"} <= logged


def test_compile_is_quiet_the_optimizers_chatter_held_back(cli, capsys):
    """DSPy's bootstrap prints "Bootstrapped N full traces …" and draws an unlabelled bar over the training set,
    and MLflow's model logging warns about type hints at hqa's line: none of it reaches stdout or stderr by default
    (issue 53)."""
    code = cli("compile", "--program", "closedbook", "--optimizer", "bootstrap", "--train", "compmix/dev",
               "--train-limit", "3", "--dev", "humaniq-compmix", "--dev-limit", "1", "--metric", "em", "--name",
               "quiet", "--no-estimate")
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert captured.out.lstrip().startswith("{") and "Bootstrapped" not in captured.out + captured.err
    import re

    bars = [b for b in re.split(r"[\r\n]", captured.err) if "%|" in b and not b.startswith("evaluate:")]
    assert "type hints" not in captured.err and not bars, captured.err  # hqa's own bar is labelled


def test_evaluate_says_how_many_answers_the_pack_holds_once_its_folder_is_taken(cli, capsys, tmp_path):
    """A dataset the knowledge pack covers only in part: one line saying so, after the run folder is accepted and
    before the first question; an ``:answerable`` set gets none."""
    out = tmp_path / "ev"
    assert cli("evaluate", "--program", "closedbook", "--dataset", "compmix/dev", "--limit", "1", "--out", str(out)) == 0
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "knowledge pack holds the gold answer" in x]
    assert line.startswith("hqa: warning:") and "0 of these 1 compmix/dev questions" in line
    assert cli("evaluate", "--program", "closedbook", "--dataset", "humaniq-compmix:answerable", "--limit", "1",
               "--out", str(tmp_path / "ans")) == 0
    assert "knowledge pack holds" not in capsys.readouterr().err
