"""hqa.lm.calls: the per-question recorders of ``hqa evaluate``, ``hqa ask`` and ``hqa serve`` (:func:`recording`)
and the group that hands DSPy's events to them (:class:`CallbackGroup`)."""

from __future__ import annotations

import logging
import threading

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.dummies import DummyLM

from hqa.lm.calls import CallbackGroup, DemoRecorder, LMRequestCounter, beside, name_predictors, recording


class QA(dspy.Signature):
    """Answer."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


class Log(BaseCallback):
    def __init__(self):
        self.events: list[str] = []

    def on_module_start(self, call_id, instance, inputs):
        self.events.append("module_start")

    def on_adapter_format_start(self, call_id, instance, inputs):
        self.events.append("format_start")

    def on_lm_start(self, call_id, instance, inputs):
        self.events.append("lm_start")

    def on_lm_end(self, call_id, outputs, exception=None):
        self.events.append("lm_end")

    def on_module_end(self, call_id, outputs, exception=None):
        self.events.append("module_end")


class Broken(BaseCallback):
    def on_lm_start(self, call_id, instance, inputs):
        raise RuntimeError("recorder bug")


def run(callbacks):
    predict = dspy.Predict(QA)
    predict.demos = [dspy.Example(question="Who wrote Hamlet?", answer="Shakespeare", id="train:1")]
    with dspy.context(lm=DummyLM([{"answer": "Paris"}, {"answer": "Rome"}]), callbacks=callbacks):
        predict(question="Capital of France?")
        predict(question="Capital of Italy?")
    return predict


def test_a_group_gives_each_member_what_it_gets_installed_alone():
    alone = [LMRequestCounter(), Log()]
    run(alone)
    grouped = [LMRequestCounter(), Log()]
    run([CallbackGroup(*grouped)])
    assert grouped[0].n == alone[0].n == 2
    assert grouped[1].events == alone[1].events
    assert grouped[1].events.count("lm_start") == 2 and "format_start" in grouped[1].events


def test_the_demo_recorder_inside_a_group_sees_the_predictor_and_its_demos():
    predict = dspy.Predict(QA)
    predict.demos = [dspy.Example(question="Who wrote Hamlet?", answer="Shakespeare", id="train:1")]
    names = name_predictors(predict)
    demos = DemoRecorder(predict)
    with dspy.context(lm=DummyLM([{"answer": "Paris"}]), callbacks=[CallbackGroup(LMRequestCounter(), demos)]):
        predict(question="Capital of France?")
    assert demos.used == {names[id(predict)]: ["train:1"]}


def test_a_failing_member_is_logged_and_the_others_still_run(caplog):
    counter = LMRequestCounter()
    with caplog.at_level(logging.WARNING, logger="dspy.utils.callback"):
        run([CallbackGroup(Broken(), counter)])
    assert counter.n == 2
    assert "recorder bug" in caplog.text


def test_recording_hears_the_lm_and_the_predictors_of_this_context_and_nothing_else():
    """The recorders get each predictor call and LM request made inside, through the LM's and the predictors' own
    callbacks: nothing enters DSPy's settings, so DSPy does not dispatch its adapters' calls (issue 38)."""
    predict = dspy.Predict(QA)
    predict.demos = [dspy.Example(question="Who wrote Hamlet?", answer="Shakespeare", id="train:1")]
    name = name_predictors(predict)[id(predict)]
    log, outer, inner, demos = Log(), LMRequestCounter(), LMRequestCounter(), DemoRecorder(predict)
    with dspy.context(lm=DummyLM([{"answer": "Paris"}, {"answer": "Rome"}, {"answer": "Bern"}])):
        with recording(predict, log, outer, demos):
            assert not dspy.settings.get("callbacks")
            predict(question="Capital of France?")
            with recording(predict, inner):  # a program's own counter inside a question's (DETLLM's)
                predict(question="Capital of Italy?")
        predict(question="Capital of Switzerland?")  # after the question: nobody records it
    assert log.events == ["module_start", "lm_start", "lm_end", "module_end"] * 2
    assert (outer.n, inner.n) == (2, 1)
    assert demos.used == {name: ["train:1"]}


def test_a_call_s_own_demos_are_the_ones_recorded():
    """A predictor called with ``demos=`` (the agent's per-step demos) formats those, not its own."""
    predict = dspy.Predict(QA)
    predict.demos = [dspy.Example(question="Who wrote Hamlet?", answer="Shakespeare", id="train:1")]
    step = [dspy.Example(question="Who painted Guernica?", answer="Picasso", id="human:7")]
    demos = DemoRecorder(predict)
    with dspy.context(lm=DummyLM([{"answer": "Paris"}])), recording(predict, demos):
        predict(question="Capital of France?", demos=step)
    assert demos.used == {name_predictors(predict)[id(predict)]: ["human:7"]}


def test_concurrent_questions_record_their_own_requests_and_a_step_beside_is_its_question_s():
    predict = dspy.Predict(QA)
    lm = DummyLM([{"answer": "Paris"}] * 12)
    counts: dict[str, int] = {}
    both_recording = threading.Barrier(2)

    def ask(key: str, calls: int, aside: int) -> None:
        counter = LMRequestCounter()
        with dspy.context(lm=lm), recording(predict, counter):
            both_recording.wait(timeout=30)
            for _ in range(calls):
                predict(question="Capital of France?")
            for future in [beside(predict, question="Capital of Italy?") for _ in range(aside)]:
                future.result(timeout=30)
        counts[key] = counter.n

    threads = [threading.Thread(target=ask, args=("a", 1, 0)), threading.Thread(target=ask, args=("b", 2, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert counts == {"a": 1, "b": 4}
