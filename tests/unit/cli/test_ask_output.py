"""``hqa ask`` input and output: the question is capped at serve's limit, and control characters in what it prints
(question, answer, evidence, tool output) are escaped so they cannot drive the terminal."""

from __future__ import annotations

import json
from types import SimpleNamespace

import dspy
import pytest

import hqa.app
from hqa.cli.entry import main
from hqa.serve.api import MAX_QUESTION_CHARS

EVIL_ANSWER = "Paris\x1b[2J\x1b[31m\nA: London\u202e"
EVIL_PASSAGE = "France\r\x07 capital\x9b is Paris"


class _Program(dspy.Module):
    def __init__(self):
        super().__init__()
        self.asked: list[str] = []

    def forward(self, question):
        self.asked.append(question)
        trace = {"program": "scripted", "answers": {"text": EVIL_ANSWER},
                 "evidence": [{"source": "text", "text": EVIL_PASSAGE, "meta": {"title": "Fr\x1bance"}}],
                 "tool_calls": [{"tool": "Search", "input": "q\x00", "output": "out\x1b[1m"}]}
        return dspy.Prediction(answer=EVIL_ANSWER, trace=trace)


@pytest.fixture()
def ask(monkeypatch, tmp_path):
    (tmp_path / "hqa.toml").write_text("")
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "hqa.toml"))
    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(tmp_path / "art"))
    program = _Program()
    pack = SimpleNamespace(warned_sources=set(), evidence_from=lambda: "the knowledge pack")  # the toolbox's names
    monkeypatch.setattr(hqa.app, "open_program", lambda *a, **kw: SimpleNamespace(program=program, warnings=[],
                                                                                  toolbox=pack))
    monkeypatch.setattr(hqa.app, "prefetch", lambda opened: SimpleNamespace(join=lambda: None))

    def run(*argv):
        return main(["ask", *argv])

    run.program = program
    return run


def test_the_question_is_capped_as_serve_caps_it(ask, capsys):
    assert MAX_QUESTION_CHARS == 1000
    long = "Who " + "x" * (MAX_QUESTION_CHARS - 5) + "?"
    assert ask("--json", long + "y") == 2
    err = capsys.readouterr().err
    assert f"question is {MAX_QUESTION_CHARS + 1} characters long; the limit is {MAX_QUESTION_CHARS}" in err
    assert len(err.strip().splitlines()) == 1 and not ask.program.asked  # refused before the program runs
    assert ask("--json", long) == 0 and ask.program.asked == [long]  # exactly the limit is asked


def test_control_characters_are_escaped_in_text_output(ask, capsys):
    assert ask("Capital\x1b[8m of France?") == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x00\r\x9b\u202e")
    assert "Q: Capital\\x1b[8m of France?" in out
    assert "A: Paris\\x1b[2J\\x1b[31m\\nA: London\\u202e" in out
    assert [line for line in out.splitlines() if line.startswith("A: ")] == [
        "A: Paris\\x1b[2J\\x1b[31m\\nA: London\\u202e"]  # the answer cannot forge a second answer line
    assert "France\\r\\x07 capital\\x9b is Paris  <- Fr\\x1bance" in out
    assert "tool Search(q\\x00) -> out\\x1b[1m" in out


def test_json_output_keeps_the_answer_exact(ask, capsys):
    assert ask("--json", "Capital of France?") == 0
    assert json.loads(capsys.readouterr().out)["answer"] == EVIL_ANSWER  # JSON escapes controls itself


def test_an_abstention_prints_as_readable_lines_with_the_question_still_escaped(ask, capsys):
    """The reason and each candidate on a line of their own (the line breaks are hqa's); what came from the
    question or the evidence is still escaped, so a candidate cannot forge a line either."""
    def abstain(question):
        ask.program.asked.append(question)
        return dspy.Prediction(answer="", abstained=True, reason="confidence 0.41 is below the calibrated threshold "
                               "0.53", confidence=0.41, candidates=[
                                   {"text": "George Orwell", "source": "sparql", "score": 4.2,
                                    "support": "Animal Farm author George Orwell"},
                                   {"text": "Eric\nA: Blair\x1b[2J", "source": "text", "score": 1.5,
                                    "support": "Orwell was born Eric Blair"}],
                               trace={"program": "simple"})

    ask.program.forward = abstain
    assert ask("Who wrote\x1b[8m Animal Farm?") == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Q: Who wrote\\x1b[8m Animal Farm?"
    assert lines[1].startswith("No answer found in the knowledge pack (confidence 0.41 is below the calibrated")
    assert lines[2] == "Best candidates:"
    assert lines[3] == "  George Orwell [sparql, score 4.2] — Animal Farm author George Orwell"
    assert lines[4] == "  Eric\\nA: Blair\\x1b[2J [text, score 1.5] — Orwell was born Eric Blair"
    assert "\\n" not in "".join(lines[1:4]) and not any(line.startswith("A: ") for line in lines)
    assert ask("--json", "Who wrote Animal Farm?") == 0
    body = json.loads(capsys.readouterr().out)
    assert {k: body[k] for k in ("answer", "abstained", "confidence")} == {"answer": None, "abstained": True,
                                                                        "confidence": 0.41}
    assert [c["text"] for c in body["candidates"]] == ["George Orwell", "Eric\nA: Blair\x1b[2J"]


class _Steps(dspy.Module):
    """Two predictor calls over a scripted LM, the first of whose replies cannot be parsed (the program answers from
    the second: a fallback)."""

    def __init__(self):
        super().__init__()
        self.think = dspy.Predict("question -> thought")
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        from hqa.lm.calls import safe_predict
        from hqa.schemas.trace import new_trace

        trace = new_trace("scripted", question)
        out, error = safe_predict(self.think, question=question)
        trace.note(error)
        final = self.answer(question=question).answer
        trace.answers.final = final
        return dspy.Prediction(answer=final, trace=trace.to_dict())


def test_ask_shows_each_step_as_it_happens_with_v_and_flags_a_fallback(monkeypatch, tmp_path, capsys):
    """``hqa ask -v`` (or a terminal) writes a line on stderr as each predictor call starts and ends; an answer
    given after an unparsable step gets one line under it, and ``--json`` has the same in ``fallback``."""
    from dspy.utils import DummyLM

    from hqa.lm.adapters import StrictChatAdapter

    (tmp_path / "hqa.toml").write_text("")
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "hqa.toml"))
    program = _Steps()
    monkeypatch.setattr(hqa.app, "open_program", lambda *a, **kw: SimpleNamespace(program=program, warnings=[]))
    monkeypatch.setattr(hqa.app, "prefetch", lambda opened: SimpleNamespace(join=lambda: None))
    replies = [{"nothing": "x"}, {"nothing": "x"}, {"answer": "Paris"}]
    with dspy.context(lm=DummyLM(list(replies)), adapter=StrictChatAdapter()):
        assert main(["ask", "-v", "Capital of France?"]) == 0
    out, err = capsys.readouterr()
    steps = [line for line in err.splitlines() if line.startswith("  ")]
    assert steps[0] == "  … think" and steps[1].startswith("  ✗ think: AdapterParseError")
    assert steps[2] == "  … answer" and steps[3] == "  ✓ answer: answer: Paris"
    lines = out.splitlines()
    assert lines[1] == "A: Paris" and lines[2].startswith("hqa: fallback (sources): think's reply could not be parsed")
    with dspy.context(lm=DummyLM(list(replies)), adapter=StrictChatAdapter()):
        assert main(["ask", "--json", "Capital of France?"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["fallback"]["step"] == "think" and answer["fallback"]["kind"] == "sources"
    assert answer["parse_failures"] == 2 and answer["retries"] == 1


def test_each_source_that_could_not_answer_is_one_line_and_a_kg_warned_at_start_up_is_not_repeated():
    from hqa.cli.ask import source_warnings

    trace = {"sparql": [{"query": "ASK {}", "error": "SPARQL endpoint down\x1b[2J", "unavailable": True},
                        {"query": "ASK {}", "error": "again", "unavailable": True}],
             "source_errors": {"text": "Wikipedia unavailable: timed out", "linker": "entity linker unavailable"}}
    assert source_warnings(trace, set()) == [
        "the KG could not answer: SPARQL endpoint down\\x1b[2J", "the text source could not answer: Wikipedia "
        "unavailable: timed out", "the entity linker could not answer: entity linker unavailable"]
    assert [line.split(" could")[0] for line in source_warnings(trace, {"kg"})] == ["the text source",
                                                                                  "the entity linker"]
    assert source_warnings({"sparql": [{"query": "ASK {}", "error": "syntax"}]}, set()) == []  # not an outage
