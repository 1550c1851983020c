"""The run folder's files have one owner (hqa.schemas.run_folder): their names are the on-disk format, and no other module of
the package spells them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from hqa.schemas.run_folder import CompareFolder, RunFolder, check_run_tag, lock_folder, read_rows

HQA = Path(__file__).resolve().parent.parent.parent.parent / "hqa"
FORMAT = {"predictions.jsonl", ".run.json", "predictions.jsonl.run.json", ".hqa-lock", "summary.json", "summary.md",
          "metrics.png", "agreement.png", "import.json", "pooled.json", "table.md", "table.csv", "plot.png",
          "rows.json", "arms.json", "summary.csv"}


def test_the_names_are_the_format_earlier_versions_wrote(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.rows_path == tmp_path / "predictions.jsonl"
    assert folder.tag_path == tmp_path / "predictions.jsonl.run.json"
    assert [p.name for p in folder.report_files()] == ["summary.md", "summary.json", "metrics.png", "agreement.png",
                                                        "predictions.jsonl"]
    assert (folder.import_info.name, folder.pooled.name) == ("import.json", "pooled.json")
    compare = CompareFolder(tmp_path)
    assert [compare.table_md.name, compare.table_csv.name, compare.plot.name, compare.rows_json.name,
            compare.arms.name, compare.summary_md.name, compare.summary_csv.name] == \
        ["table.md", "table.csv", "plot.png", "rows.json", "arms.json", "summary.md", "summary.csv"]
    assert compare.arm_rows("humaniq/dpp k=3").name == "humaniq_dpp_k=3.jsonl"


def test_of_takes_a_folder_or_a_rows_file(tmp_path):
    assert RunFolder.of(tmp_path) == (RunFolder(tmp_path), tmp_path / "predictions.jsonl")
    arm = tmp_path / "simple.jsonl"
    assert RunFolder.of(arm) == (RunFolder(tmp_path), arm)


def test_a_run_folder_of_the_current_format_reads_back(tmp_path):
    """Rows and the tag as ``hqa evaluate`` writes them (the tag through :func:`check_run_tag`) read back through the
    folder; a missing or unreadable tag is None."""
    folder = RunFolder(tmp_path)
    assert folder.tag() is None and folder.rows() == []
    row = {"id": "q1", "question": "Who?", "answer": "x", "gold": ["x"], "gold_ids": [], "scores": {"em": 1.0}}
    folder.rows_path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    check_run_tag(folder.rows_path, {"program": "simple", "dataset": "compmix/test"}, [], resume=False)
    assert folder.tag() == {"program": "simple", "dataset": "compmix/test"}
    assert [r["id"] for r in folder.rows()] == ["q1"] == [r["id"] for r in read_rows(folder.rows_path)]
    folder.tag_path.write_text("{not json", encoding="utf-8")
    assert folder.tag() is None


def test_one_writer_at_a_time(tmp_path):
    from hqa.errors import HQAError

    held = lock_folder(tmp_path)
    try:
        with pytest.raises(HQAError, match="being written by another run"):
            lock_folder(tmp_path)
    finally:
        held.close()
    lock_folder(tmp_path).close()


def test_a_busy_output_is_named_by_its_file_not_its_folder(tmp_path, monkeypatch):
    """``hqa batch q.jsonl --out o.jsonl`` while another batch writes it said "." is being written."""
    import dspy

    from hqa.errors import HQAError
    from hqa.jobs.batch import run_batch

    monkeypatch.chdir(tmp_path)
    held = lock_folder(Path("."))
    try:
        with pytest.raises(HQAError) as err:
            run_batch(lambda question: dspy.Prediction(answer="x"), [{"id": "1", "question": "q?"}], Path("o.jsonl"))
    finally:
        held.close()
    assert str(err.value).startswith("o.jsonl is being written by another run (pid ")


def test_a_report_refuses_a_folder_without_rows(tmp_path):
    from hqa.errors import DataError

    folder = RunFolder(tmp_path)
    with pytest.raises(DataError, match=r"no predictions.jsonl rows \(run hqa evaluate --out "):
        folder.required_rows()
    row = {"id": "q1", "question": "Who?", "answer": "x", "gold": ["x"], "gold_ids": [], "scores": {"em": 1.0}}
    folder.rows_path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert [r["id"] for r in folder.required_rows()] == ["q1"]


def _literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_no_other_module_spells_a_run_folder_file_name():
    """Outside hqa/schemas/run_folder.py no string literal of the package (docstrings aside) is one of the folder's file
    names: a module that builds ``folder / "predictions.jsonl"`` itself would bypass the owner."""
    owner = next(HQA.rglob("run_folder.py"))
    spelled = {f"{path.relative_to(HQA)}: {name}" for path in HQA.rglob("*.py") if path != owner
               for name in _literals(path) & FORMAT}
    assert not spelled
