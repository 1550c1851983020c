"""Structured outputs to OpenAI-compatible servers (issue 53), on the wire: ``lm.response_format = "auto"`` finds the
spelling each kind of server applies (the loopback stand-in speaking OpenAI's / vLLM's, llama-cpp-python's, plain
JSON mode, nothing), a named spelling is sent as named, and retries and cached replies are counted.  Each program
against a real ``llama_cpp.server``: tests/integration/test_llama_server_*.py."""

from __future__ import annotations

import dspy
import pytest
from standins.openai_lm import format_spelling

from hqa.config import load_settings
from hqa.lm.calls import LMRequestCounter, recording


def settings_for_server(api_base: str, **env: str):
    environ = {"HQA_LM__PROVIDER": "openai_compatible", "HQA_LM__API_BASE": api_base, "HQA_LM__MODEL": "standin",
               "HQA_LM__CACHE": "false", **env}
    return load_settings(None, environ=environ)


class Answer(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


@pytest.fixture()
def fresh_probe(monkeypatch):
    from hqa.lm import openai_compatible as oc

    monkeypatch.setattr(oc, "_PROBED", {})


@pytest.mark.server
@pytest.mark.parametrize("honoured, found, sent", [
    ("json_schema", "json_schema", "json_schema"),  # OpenAI, vLLM, SGLang, Ollama's /v1
    ("json_object_schema", "json_object_schema", "json_object_schema"),  # llama-cpp-python's server
    ("json_object", "json_object", "json_object"),  # JSON mode only: the schema is dropped
    ("none", "none", "none"),  # no response format at all: the prompt alone asks for JSON
])
def test_auto_finds_the_spelling_the_server_applies_and_sends_it(server, fresh_probe, honoured, found, sent):
    from hqa.app import configure_dspy

    server.state.behaviour.response_format = honoured
    lm = configure_dspy(settings_for_server(server.api_base))
    used = lm.engine.response_format_in_use()
    assert (used.mode, used.how) == (found, "probe"), used
    probe_requests = server.state.stats["calls"]
    assert 1 <= probe_requests <= 3
    predict = dspy.Predict(Answer)
    counter = LMRequestCounter()
    with recording(predict, counter):
        out = predict(question="What is the capital of Gabon?")
    assert out.answer == "Libreville" and counter.counts()["parse_failures"] == 0
    # the question's one request went out in the probed spelling (the probe's own requests came first)
    body = server.state.stats["bodies"][probe_requests]
    assert format_spelling(body) == sent
    fmt = body.get("response_format") or {}
    schema = fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")
    if sent in ("json_schema", "json_object_schema"):  # the signature's fields, all required
        assert schema["properties"].keys() == {"answer"} and schema["required"] == ["answer"]
    else:
        assert schema is None


@pytest.mark.server
def test_a_named_spelling_is_not_probed_and_a_refused_one_fails_loudly(server, fresh_probe):
    from hqa.app import configure_dspy

    server.state.behaviour.response_format = "json_object_schema"
    lm = configure_dspy(settings_for_server(server.api_base, HQA_LM__RESPONSE_FORMAT="json_schema"))
    assert lm.engine.response_format_in_use().how == "settings" and server.state.stats["calls"] == 0
    with pytest.raises(Exception) as failed:  # llama-cpp-python's server answers 500 to OpenAI's spelling
        dspy.Predict(Answer)(question="What is the capital of Gabon?")
    assert "500" in str(failed.value) or "Server" in type(failed.value).__name__
    assert server.state.stats["statuses"].get("500", 0) >= 1


@pytest.mark.server
def test_retries_and_cached_replies_are_counted_per_question(server, fresh_probe):
    """DSPy's retry of a failed request counts as a retry (the engine is asked twice for one request); a reply
    from DSPy's LM cache counts as cached (no engine is asked)."""
    from hqa.app import configure_dspy

    configure_dspy(settings_for_server(server.api_base, HQA_LM__RESPONSE_FORMAT="json_schema",
                                       HQA_LM__CACHE="true", HQA_LM__NUM_RETRIES="2"))
    predict = dspy.Predict(Answer)
    server.state.forced.extend([500])  # the next request fails once, then succeeds
    first, second = LMRequestCounter(), LMRequestCounter()
    question = f"What is the capital of Gabon? ({id(first)})"  # not in any earlier cache
    with recording(predict, first):
        predict(question=question)
    with recording(predict, second):
        predict(question=question)
    assert first.counts() == {"lm_calls": 1, "cached_lm_calls": 0, "retries": 1, "parse_failures": 0}
    assert first.failures[0]["kind"] == "retry"
    assert second.counts() == {"lm_calls": 1, "cached_lm_calls": 1, "retries": 0, "parse_failures": 0}
