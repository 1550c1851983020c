"""hqa.lm.calls.CallbackGroup: the per-question recorders of ``hqa evaluate`` installed as one DSPy callback."""

from __future__ import annotations

import logging

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.dummies import DummyLM

from hqa.lm.calls import CallbackGroup, DemoRecorder, LMRequestCounter, name_predictors


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
