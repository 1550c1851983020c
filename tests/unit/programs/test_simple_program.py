"""The first hybrid program (closed book + one retrieval hop) and the closed-book baselines, with DummyLM."""

import threading

import dspy
import pytest
from dspy.utils import DummyLM

from hqa.programs.closedbook import ClosedBook
from hqa.programs.simple import SimpleHybrid
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox


class KeepOrder:
    kind = "test"

    def rerank(self, query, items, k):
        return items[:k]


def fake_dense(query, k=5):
    return [Evidence(text="George Orwell wrote Animal Farm.", source="text", meta={"id": "p1", "title": "Animal Farm"})]


def fake_bm25(query, k=5):
    return [Evidence(text="Animal Farm author George Orwell", source="triples", meta={"s": "Q1396889"})]


@pytest.fixture()
def toolbox(settings_for):
    """Free-text answers (the mode for capable LMs): the answer predictor sees the evidence and writes the answer;
    the grounded mode of the embedded default is tested in test_grounded.py."""
    return Toolbox(settings_for(programs_answer_mode="free"), dense=fake_dense, bm25=fake_bm25, reranker=KeepOrder())


def test_one_hop_path_and_trace(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}, {"answer": "George Orwell"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox, k=10)(question="Who is the author of Animal Farm?")
    t = pred.trace
    assert pred.answer == "George Orwell" and len(lm.history) == 2
    assert t["answers"]["parametric"] == "Aldous Huxley" and t["answers"]["final"] == "George Orwell"
    assert t["entities"][0]["id"] == "Q1396889"  # "Animal Farm" spotted in the question and linked
    q = t["sparql"][0]
    assert "wd:Q1396889" in q["query"] and q["error"] is None
    sparql_ev = [e for e in t["evidence"] if e["source"] == "sparql"]
    assert any(e["text"] == "Animal Farm author George Orwell" for e in sparql_ev)  # labels resolved from the KG
    assert {e["source"] for e in t["evidence"]} == {"text", "triples", "sparql"}
    # the evidence reached the answer predictor's prompt
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert "[sparql] Animal Farm author George Orwell" in prompt and "Aldous Huxley" in prompt


def test_unparsable_answer_keeps_the_parametric_answer(toolbox):
    lm = DummyLM([{"answer": "George Orwell"}, {"nothing": "x"}, {"nothing": "x"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox)(question="Who is the author of Animal Farm?")
    assert pred.answer == "George Orwell" and pred.trace["errors"]


@pytest.mark.parametrize("cot", [False, True])
def test_closed_book(cot):
    lm = DummyLM([{"reasoning": "Known.", "answer": "Answer: Paris."}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = ClosedBook(cot=cot)(question="Capital of France?")
    assert pred.answer == "Paris" and pred.trace["program"] == ("cot" if cot else "closedbook")
    assert ("reasoning" in pred.trace["steps"][0]) == cot


def test_program_holds_no_retriever_state(toolbox):
    """The toolbox is given at construction, shared by every copy (optimizers deep-copy programs; indexes are never
    copied) and no part of the program's DSPy state."""
    import copy as copying
    import json

    prog = SimpleHybrid(toolbox=toolbox)
    for copy in (prog.deepcopy(), copying.deepcopy(prog), prog.reset_copy()):
        assert copy.toolbox is prog.toolbox
    assert "toolbox" not in json.dumps(prog.dump_state(), default=str).lower()
    assert all(not isinstance(p, Toolbox) for _, p in prog.named_parameters())


class _MemoryWaitsForTheHop(DummyLM):
    """A DummyLM whose closed-book reply waits (up to ``hold`` seconds) until the hop's dense search has run."""

    def __init__(self, answers, searched, hold=10.0):
        super().__init__(answers)
        self.searched, self.hold, self.started, self.finished = searched, hold, threading.Event(), threading.Event()

    def forward(self, prompt=None, messages=None, **kwargs):
        first = not self.started.is_set()
        self.started.set()
        if first:
            self.searched.wait(self.hold)
        try:
            return super().forward(prompt=prompt, messages=messages, **kwargs)
        finally:
            self.finished.set()


def test_the_closed_book_call_runs_while_the_hop_retrieves(settings_for):
    """The memory answer needs no evidence, so its LM call and the hop overlap (a question's wall time holds the
    longer of the two, not their sum); the trace still records it first and the answer step still sees it."""
    searched, seen = threading.Event(), []
    lm = None

    def dense(query, k=5):
        seen.append(lm.started.is_set() and not lm.finished.is_set())  # the closed-book call is in flight
        searched.set()
        return fake_dense(query, k)

    lm = _MemoryWaitsForTheHop([{"answer": "Aldous Huxley"}, {"answer": "George Orwell"}], searched)
    tb = Toolbox(settings_for(programs_answer_mode="free"), dense=dense, bm25=fake_bm25, reranker=KeepOrder())
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=tb, k=10)(question="Who is the author of Animal Farm?")
    assert seen == [True]
    t = pred.trace
    assert [s["step"] for s in t["steps"]][:2] == ["parametric", "retrieve"]
    assert t["answers"]["parametric"] == "Aldous Huxley" and pred.answer == "George Orwell"
    assert "Aldous Huxley" in lm.history[-1]["messages"][-1]["content"]


def test_a_failing_hop_waits_for_the_closed_book_call(settings_for):
    """The hop's exception reaches the caller only after the LM call it overlapped has ended."""
    lm = _MemoryWaitsForTheHop([{"answer": "Aldous Huxley"}], threading.Event(), hold=1.0)  # the hop never searches

    def dense(query, k=5):
        raise RuntimeError("index gone")

    tb = Toolbox(settings_for(programs_answer_mode="free"), dense=dense, bm25=fake_bm25, reranker=KeepOrder())
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()), pytest.raises(RuntimeError, match="index gone"):
        SimpleHybrid(toolbox=tb, k=10)(question="Who is the author of Animal Farm?")
    assert lm.finished.is_set()
