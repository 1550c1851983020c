"""The collector's policy while questions run (:mod:`hqa.jobs.heap`): ``hqa evaluate`` freezes what existed before
its questions and raises the youngest generation's threshold while they run, puts both back afterwards, and asks its
questions with DSPy's LM history off; ``hqa serve`` holds the same policy from the end of warm-up to shut-down."""

from __future__ import annotations

import gc
import threading
import time

import dspy
from dspy.utils import DummyLM
from fastapi.testclient import TestClient

from hqa.app import OpenedProgram
from hqa.jobs import heap
from hqa.jobs.evaluate import evaluate
from hqa.serve import create_app


def frozen(obj) -> bool:
    """Whether ``obj`` is in the permanent generation (tracked, yet in no generation a collection walks)."""
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


class Seen(dspy.Module):
    """One predictor; each call notes what the collector looked like while it ran."""

    def __init__(self, marker):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")
        self.marker = marker
        self.seen: list[tuple[bool, int]] = []

    def forward(self, question):
        self.seen.append((frozen(self.marker), gc.get_threshold()[0]))
        return self.answer(question=question)


def examples(n):
    return [dspy.Example(id=str(i), question=f"q{i}", answers=["a"]).with_inputs("question") for i in range(n)]


def test_questions_run_with_what_existed_frozen_then_the_collector_is_put_back():
    marker = [object()]  # made before the run: frozen while its questions run, walked again afterwards
    program = Seen(marker)
    before = gc.get_threshold()
    lm = DummyLM([{"answer": "a"}] * 4)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        summary = evaluate(program, examples(4), threads=2)
    assert summary.errors == 0 and [r["lm_calls"] for r in summary.rows] == [1, 1, 1, 1]
    assert program.seen == [(True, heap.YOUNG_THRESHOLD)] * 4
    assert not frozen(marker) and gc.get_threshold() == before and gc.get_freeze_count() == 0
    # DSPy's LM history stays empty; the rows count the calls themselves (above)
    assert lm.history == [] and program.answer.history == []


def test_nested_and_concurrent_holds_share_one_freeze():
    before = gc.get_threshold()
    marker = [object()]
    with heap.settled():
        with heap.settled():
            assert frozen(marker)
        assert frozen(marker) and gc.get_threshold()[0] == heap.YOUNG_THRESHOLD  # the outer run still holds it
        late = heap.Hold()
        late.give_back()
        late.take()  # taken after it was given back: nothing
        late.give_back()
        assert frozen(marker)
    assert not frozen(marker) and gc.get_threshold() == before


def test_serve_holds_the_policy_from_warm_up_to_shut_down():
    marker = [object()]
    release = threading.Event()
    program = lambda question: dspy.Prediction(answer=question)  # noqa: E731 - the smallest served program
    app = create_app(OpenedProgram(program, label="echo", kind="echo", source="program"),
                     warmup=lambda: release.wait(10))
    with TestClient(app) as client:
        during_warmup = frozen(marker)
        release.set()
        deadline = time.monotonic() + 10
        while client.get("/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        ready = frozen(marker)
    assert not during_warmup and ready
    assert not frozen(marker) and gc.get_freeze_count() == 0
