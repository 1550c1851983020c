"""Structured outputs to OpenAI-compatible servers (issue 53), on the wire: ``lm.response_format = "auto"`` finds the
spelling each kind of server applies (the loopback stand-in speaking OpenAI's / vLLM's, llama-cpp-python's, plain
JSON mode, nothing), and against a real ``python -m llama_cpp.server`` (started here, behind a recording proxy) every
program's requests carry the signature's schema in llama-cpp-python's spelling and its replies parse."""

from __future__ import annotations

import json
import sys

import dspy
import pytest
from prockit import run_hqa, start
from standins.openai_lm import format_spelling
from standins.servers import RecordingProxy, free_port, stop, wait_http

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


# -- a real llama_cpp.server ------------------------------------------------------------------------------------------
#: each program's question: what it runs with here (one question, few agent steps: the suite's time)
PROGRAMS = {
    "closedbook": [],
    "simple": [],
    "sscot": ["--program-kwargs", '{"n_samples": 2}'],
    "detllm": ["--program-kwargs", '{"hops": 1}'],
    "humaniq": ["--program-kwargs", '{"max_iters": 1}'],
}


@pytest.fixture(scope="module")
def llama_server():
    """``python -m llama_cpp.server`` with the shipped GGUF, as docs/serving.md's recipe starts it, behind a
    recording proxy (the requests hqa sent, the real server's replies)."""
    from hqa.lm.models import packaged_gguf

    port = free_port()
    proc = start([sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_gguf()), "--host", "127.0.0.1",
                  "--port", str(port), "--n_ctx", "8192", "--n_threads", "2", "--model_alias", "smollm2"])
    proxy = None
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc)
        proxy = RecordingProxy(f"http://127.0.0.1:{port}").start()
        yield proxy
    finally:
        if proxy is not None:
            proxy.stop()
        stop(proc)


def evaluate_once(program: str, tmp_path, built_pack, name: str, **env: str) -> dict:
    """``hqa evaluate`` of ``program`` on the first answerable CompMix test question; its row."""
    out = tmp_path / name
    proc = run_hqa("evaluate", "--program", program, *PROGRAMS[program], "--dataset", "compmix/test:answerable",
                   "--limit", "1", "--no-estimate", "--out", str(out), cwd=tmp_path, timeout=900,
                   env_extra={"HQA_LM__CACHE": "false", "HQA_PATHS__ARTIFACTS": str(built_pack),
                              "HQA_LM__TIMEOUT": "900", "HQA_TRACKING__URI": f"sqlite:///{tmp_path / 'mlflow.db'}", **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "predictions.jsonl").read_text().splitlines()[0])


@pytest.mark.server
@pytest.mark.real_lm
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_program_sends_its_schema_to_llama_cpp_server_and_its_replies_parse(llama_server, built_pack, tmp_path,
                                                                                 program):
    """The schema reached the server on every request, and the replies parse as well as the embedded engine's:
    with the recipe's sampling (``repeat_penalty`` 1.0, as in-process) no more parse failures than the same
    question in-process, which is run when the server's reply had any (a reply cut at ``max_tokens`` fails in
    both)."""
    before = len(llama_server.bodies)
    # the programs as the embedded model runs them: answer_mode and abstain are "auto" (grounded and on for the
    # embedded LM, free and off for a remote one, which hqa cannot tell is the same 135M model)
    row = evaluate_once(program, tmp_path, built_pack, "server", HQA_LM__PROVIDER="openai_compatible",
                        HQA_LM__API_BASE=llama_server.api_base, HQA_LM__MODEL="smollm2",
                        HQA_LM__EXTRA_BODY=json.dumps({"repeat_penalty": 1.0}), HQA_PROGRAMS__ANSWER_MODE="grounded",
                        HQA_PROGRAMS__ABSTAIN="on")
    sent = llama_server.bodies[before:]
    questions = [b for b in sent if b.get("max_tokens") != 24]  # the probe's requests ask for 24 tokens
    # every request the server got is one of the row's, or DSPy's retry of one (a client timeout on a loaded machine)
    assert row["lm_calls"] >= 1 and len(questions) == row["lm_calls"] + row["retries"], (row, len(questions))
    for body in questions:  # llama-cpp-python's own spelling, with the signature's fields as the schema
        fmt = body["response_format"]
        assert fmt["type"] == "json_object" and fmt["schema"]["type"] == "object" and fmt["schema"]["required"]
        assert body["repeat_penalty"] == 1.0
    assert row["error"] is None
    if row["parse_failures"]:
        local = evaluate_once(program, tmp_path, built_pack, "in-process")
        assert row["parse_failures"] <= local["parse_failures"], (row["parse_failures"], local["parse_failures"])
        assert abs(row["lm_calls"] - local["lm_calls"]) <= max(1, 0.1 * local["lm_calls"])
