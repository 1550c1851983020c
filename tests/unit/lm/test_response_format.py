"""Structured outputs to an OpenAI-compatible server (issue 53): the signature's schema leaves in the spelling of
``lm.response_format``, and a reply that puts a JSON object where text was asked for is a parse failure, counted,
never an answer.  (The wire each spelling becomes is checked against the loopback stand-in and a real
``llama_cpp.server`` in tests/integration/test_response_format.py.)"""

from __future__ import annotations

import dspy
import pytest
from dspy.lm15 import Config, Message, Request
from dspy.utils.exceptions import AdapterParseError

from hqa.config import load_settings
from hqa.errors import ConfigError
from hqa.lm.adapters import StrictChatAdapter, StrictJSONAdapter, adapter_for
from hqa.lm.calls import LMRequestCounter, recording
from hqa.lm.openai_compatible import OpenAICompatibleEngine, ResponseFormat

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}
CANONICAL = {"type": "json_schema", "schema": SCHEMA, "name": "r"}


def schema_request(**config) -> Request:
    return Request(model="openai-compatible/m", messages=(Message.user("Who?"),),
                   config=Config(response_format=CANONICAL, **config))


def engine(mode: str, **kw) -> OpenAICompatibleEngine:
    return OpenAICompatibleEngine("openai-compatible/m", "http://127.0.0.1:9/v1", response_format=mode, **kw)


@pytest.mark.parametrize("mode, fmt, extension", [
    ("json_schema", CANONICAL, None),  # DSPy's own wire writes OpenAI's spelling
    ("json_object_schema", None, {"type": "json_object", "schema": SCHEMA}),  # verbatim, through the extensions
    ("json_object", {"type": "json_object"}, None),
    ("none", None, None),
])
def test_each_mode_shapes_the_schema_request_its_own_way(mode, fmt, extension):
    shaped = engine(mode).shaped(schema_request())
    assert shaped.config.response_format == fmt
    assert (shaped.config.extensions or {}).get("response_format") == extension
    assert shaped.messages == schema_request().messages


def test_a_request_without_a_response_format_is_left_alone_and_extra_body_rides_along():
    plain = Request(model="openai-compatible/m", messages=(Message.user("Who?"),))
    eng = engine("json_object_schema", extra_body={"repeat_penalty": 1.0, "cache_prompt": True})
    assert eng.shaped(plain).config.response_format is None
    assert eng.shaped(plain).config.extensions == {"repeat_penalty": 1.0, "cache_prompt": True}
    shaped = eng.shaped(schema_request())
    assert shaped.config.extensions == {"repeat_penalty": 1.0, "cache_prompt": True,
                                        "response_format": {"type": "json_object", "schema": SCHEMA}}
    assert engine("none").shaped(plain) is plain


def test_extra_body_cannot_overwrite_hqas_own_fields_and_modes_are_checked():
    with pytest.raises(ConfigError, match="may not set messages, model"):
        engine("auto", extra_body={"model": "x", "messages": []})
    with pytest.raises(ConfigError, match="lm.response_format must be one of"):
        engine("grammar")
    with pytest.raises(ConfigError, match="lm.response_format"):
        load_settings(None, environ={"HQA_LM__RESPONSE_FORMAT": "grammar"})


def test_auto_uses_the_probe_once_per_server_and_model(monkeypatch):
    from hqa.lm import openai_compatible as oc

    asked = []

    def probe(api_base, model, api_key="", timeout=60.0):
        asked.append((api_base, model))
        return ResponseFormat("json_object_schema", "probe", "json_schema: HTTP 500; json_object_schema: applied")

    monkeypatch.setattr(oc, "probe_response_format", probe)
    monkeypatch.setattr(oc, "_PROBED", {})
    first, second = engine("auto"), engine("auto")
    for eng in (first, second):
        assert eng.shaped(schema_request()).config.extensions["response_format"]["type"] == "json_object"
    assert asked == [("http://127.0.0.1:9/v1", "m")]
    assert engine("json_schema").response_format_in_use() == ResponseFormat("json_schema", "settings")
    assert first.dump_state()["response_format"] == "auto"  # a saved program probes its own server again


def test_the_adapter_follows_the_provider_unless_named():
    def settings(**env):
        return load_settings(None, environ={f"HQA_LM__{k.upper()}": v for k, v in env.items()}).lm

    assert type(adapter_for(settings())) is StrictJSONAdapter
    assert type(adapter_for(settings(provider="openai_compatible", model="m", api_base="http://127.0.0.1:9/v1"))) is \
        StrictJSONAdapter
    assert type(adapter_for(settings(provider="openai", model="gpt-4o-mini"))) is StrictChatAdapter
    assert type(adapter_for(settings(adapter="chat"))) is StrictChatAdapter


class Reply(dspy.Signature):
    """Answer."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


@pytest.mark.parametrize("reply", ['{"answer": {"title": "Animal Farm", "authority_name": "B"}}',
                                   '{"answer": ["George Orwell", "Eric Blair"]}'])
def test_a_json_structure_in_a_text_field_is_a_parse_failure_not_a_repr(reply):
    with pytest.raises(AdapterParseError, match="holds a JSON (object|array) where text was asked for"):
        StrictJSONAdapter().parse(Reply, reply)
    assert StrictJSONAdapter().parse(Reply, '{"answer": 1984}') == {"answer": "1984"}  # a number is its text
    assert dspy.JSONAdapter().parse(Reply, reply)["answer"].startswith(("{'", "['"))  # what DSPy alone gives


class Replies(dspy.BaseLM):
    """An LM answering each request with the next scripted text (no cache)."""

    def __init__(self, *texts: str):
        super().__init__(model="replies", cache=False)
        self.texts = list(texts)

    def forward(self, prompt=None, messages=None, **kwargs):
        from types import SimpleNamespace

        text = self.texts.pop(0)
        message = SimpleNamespace(content=text, tool_calls=None, reasoning_content=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop", logprobs=None)],
                               usage={}, model="replies")


def test_parse_failures_and_the_chat_fallback_are_counted_with_their_predictor():
    predict = dspy.Predict(Reply)
    predict.hqa_name = "generate"
    counter = LMRequestCounter()
    # the chat format's reply has no answer field; its JSON fallback writes an object where text belongs
    lm = Replies("no fields at all", '{"answer": {"title": "Animal Farm"}}')
    with dspy.context(lm=lm, adapter=StrictChatAdapter()), recording(predict, counter):
        with pytest.raises(AdapterParseError):
            predict(question="Who wrote Animal Farm?")
    assert counter.counts() == {"lm_calls": 2, "cached_lm_calls": 0, "retries": 1, "parse_failures": 2}
    assert [(f["predictor"], f["kind"]) for f in counter.failures] == [
        ("generate", "parse"), ("generate", "retry"), ("generate", "parse")]
    assert "holds a JSON object" in counter.failures[2]["error"]


def test_a_json_object_for_the_answer_makes_a_failure_row_not_a_repr():
    """``hqa evaluate``'s row of a closed-book question whose reply puts a JSON object in ``answer`` (what a small
    model behind a server in plain JSON mode wrote): no answer, the reason names the unparsable reply, and the row
    counts it."""
    from hqa.jobs.engine import run_one
    from hqa.programs.closedbook import ClosedBook

    example = dspy.Example(id="q1", question="Who is the author of Animal Farm?", answers=["George Orwell"],
                           answer_ids=[]).with_inputs("question")
    lm = Replies('{"answer": {"title": "Animal Farm", "authority_name": "Bertie Brocklehawk"}}')
    with dspy.context(lm=lm, adapter=StrictJSONAdapter()):
        row = run_one(ClosedBook(), example)
    assert row["answer"] is None and row["abstained"] is True and row["error"] is None
    assert row["reason"] == "the program gave no answer: generate's reply could not be parsed"
    assert row["parse_failures"] == 1 and row["lm_calls"] == 1 and row["fallback"] is None
    assert "Bertie" not in json_text(row["answer"]) and row["scores"]["em"] == 0.0


def json_text(value) -> str:
    import json

    return json.dumps(value)
