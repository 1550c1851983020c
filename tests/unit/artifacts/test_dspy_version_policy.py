"""DSPy's version policy for compiled programs: a program.json written by another DSPy minor version (here in the
format DSPy 3.3 writes: per predictor ``traces``, ``train``, ``demos``, ``signature``, ``lm``, and the saving
versions under ``metadata.dependency_versions``) loads with exactly one warning when its state fits the program,
and is refused with one line naming both versions when it does not."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from hqa.app import open_program
from hqa.errors import ArtifactError
from hqa.artifacts.store import load_program, manifest_checksum, save_artifact
from hqa.io.files import file_digest
from hqa.programs.closedbook import ClosedBook

PREVIOUS = "3.3.2"


def previous_minor(dest: Path, rename: dict[str, str] | None = None) -> Path:
    """Rewrite a saved artifact as the previous DSPy minor version writes it (optionally renaming predictors)."""
    state = json.loads((dest / "program.json").read_text())
    for name, entry in list(state.items()):
        if isinstance(entry, dict) and "demos" in entry:
            state[name] = {k: entry[k] for k in ("traces", "train", "demos", "signature", "lm")}
            if rename and name in rename:
                state[rename[name]] = state.pop(name)
    state["metadata"] = {"dependency_versions": {"python": "3.11", "dspy": PREVIOUS, "cloudpickle": "3.1"}}
    (dest / "program.json").write_text(json.dumps(state))
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["versions"]["dspy"] = PREVIOUS
    manifest["program_sha256"] = file_digest(dest / "program.json")
    manifest["manifest_sha256"] = manifest_checksum(manifest)  # sealed as that version's hqa wrote it
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def saved(tmp_path: Path, name: str) -> Path:
    program = ClosedBook()
    program.generate.demos = [dspy.Example(question="Capital of Italy?", answer="Rome")]
    return save_artifact(program, tmp_path / name, {"program": "closedbook", "program_kwargs": {}})


def test_fitting_state_of_the_previous_minor_loads_with_one_warning(settings_for, tmp_path):
    dest = previous_minor(saved(tmp_path, "old"))
    current = dspy.__version__
    program, manifest = load_program(dest, settings_for())
    assert program.generate.demos[0]["answer"] == "Rome"
    assert manifest["warnings"] == [
        f"compiled with dspy {PREVIOUS}; this installation has dspy {current}: its state fits program "
        "'closedbook' and was loaded (recompile with this dspy to be sure it behaves the same)"]
    opened = open_program(settings_for(), load=dest, configure=False)
    assert len(opened.warnings) == 1
    lm = DummyLM([{"answer": "Paris"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert opened.program(question="Capital of France?").answer == "Paris"
    assert "Capital of Italy?" in json.dumps(lm.history[-1]["messages"])


def test_state_that_does_not_fit_is_refused_in_one_line(settings_for, tmp_path):
    dest = previous_minor(saved(tmp_path, "odd"), rename={"generate": "generator"})
    with pytest.raises(ArtifactError) as err:
        load_program(dest, settings_for())
    text = str(err.value)
    assert "\n" not in text and "does not fit program ClosedBook" in text
    assert text.endswith(f"(compiled with dspy {PREVIOUS}; this installation has dspy {dspy.__version__})")


def test_same_minor_has_no_warning(settings_for, tmp_path):
    _program, manifest = load_program(saved(tmp_path, "same"), settings_for())
    assert manifest["warnings"] == []
