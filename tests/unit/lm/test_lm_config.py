"""The LM and knowledge sources switch by configuration alone."""

import json
from pathlib import Path

import pytest

from hqa.config import load_settings
from hqa.errors import ConfigError
from hqa.lm.models import LlamaCppEngine, build_lm, packaged_gguf

NOFILE = Path("/nonexistent-hqa.toml")


def test_local_default_is_the_packaged_smollm2_behind_an_engine():
    lm = build_lm(load_settings(NOFILE, environ={}))
    assert lm.model.startswith("local/SmolLM2-135M-Instruct")
    assert isinstance(lm._engine_spec, LlamaCppEngine)
    assert packaged_gguf().name == "SmolLM2-135M-Instruct.Q4_1.gguf" and packaged_gguf().stat().st_size > 50_000_000


def test_openai_needs_a_key_and_builds_an_openai_lm():
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        build_lm(load_settings(NOFILE, environ={"HQA_LM__PROVIDER": "openai", "HQA_LM__MODEL": "gpt-4o-mini"}))
    import os

    os.environ["HQA_TEST_KEY"] = "sk-test"
    try:
        lm = build_lm(load_settings(NOFILE, environ={"HQA_LM__PROVIDER": "openai", "HQA_LM__MODEL": "gpt-4o-mini",
                                                     "HQA_LM__API_KEY_ENV": "HQA_TEST_KEY"}))
    finally:
        del os.environ["HQA_TEST_KEY"]
    assert lm.model == "openai/gpt-4o-mini" and lm.kwargs.get("api_key") == "sk-test"


def test_openai_compatible_server_by_api_base():
    from hqa.lm.openai_compatible import OpenAICompatibleEngine

    lm = build_lm(load_settings(NOFILE, environ={"HQA_LM__PROVIDER": "openai_compatible", "HQA_LM__MODEL": "smollm2",
                                                 "HQA_LM__API_BASE": "http://127.0.0.1:8000/v1",
                                                 "HQA_LM__TIMEOUT": "7"}))
    assert lm.model == "openai-compatible/smollm2" and isinstance(lm.engine, OpenAICompatibleEngine)
    assert (lm.engine.api_base, lm.engine.timeout) == ("http://127.0.0.1:8000/v1", 7)


def test_openai_compatible_engine_declares_what_dspy_works_out_for_the_declared_server():
    """The adapters read the engine's hints: the same as DSPy's for the declared provider's route, so the JSONAdapter
    asks for the signature's schema (``response_format`` allowed, a response schema supported; the engine turns it
    into the server's spelling) and no native tools."""
    import dspy
    from dspy.clients.capabilities import capabilities

    from hqa.lm.openai_compatible import OpenAICompatibleEngine, register_openai_compatible

    register_openai_compatible()
    declared = capabilities(dspy.LM("openai-compatible/m", api_base="http://127.0.0.1:9/v1", api_key="k"))
    engine = OpenAICompatibleEngine("openai-compatible/m", "http://127.0.0.1:9/v1")
    assert capabilities(dspy.LM("openai-compatible/m", engine=engine)) == declared
    assert declared.response_schema and "response_format" in declared.params and not declared.function_calling


def test_openai_compatible_engine_is_saved_and_pickled_without_its_key_or_connection(monkeypatch):
    import pickle

    from hqa.lm.openai_compatible import OpenAICompatibleEngine

    monkeypatch.setenv("HQA_TEST_SERVER_KEY", "sk-secret")
    engine = OpenAICompatibleEngine("openai-compatible/m", "http://127.0.0.1:9/v1", "HQA_TEST_SERVER_KEY", 5.0)
    engine._engine()  # the connection, built
    assert "sk-secret" not in json.dumps(engine.dump_state()) and b"sk-secret" not in pickle.dumps(engine)
    copy = pickle.loads(pickle.dumps(engine))
    assert copy.dump_state() == engine.dump_state() and copy._native is None
    assert OpenAICompatibleEngine.load_state(engine.dump_state()).dump_state() == engine.dump_state()


def test_prompt_field_values_serialize_as_dspy_serializes_them():
    """hqa.lm.models.reuse_field_serializers (issue 38) gives DSPy's adapters the same JSON form of every field value,
    from one pydantic TypeAdapter per type, and every prompt DSPy formats after build_lm goes through it."""
    import enum

    import dspy
    import numpy as np
    import pydantic
    from dspy.adapters import base, utils

    from hqa.lm import models as hqa_lm

    build_lm(load_settings(NOFILE, environ={}))
    assert utils.serialize_for_json is hqa_lm._serialize_for_json is base.serialize_for_json
    original = hqa_lm.DSPY_SERIALIZERS["dspy.adapters.utils"]
    assert original is not hqa_lm._serialize_for_json

    class Colour(enum.Enum):
        RED = "red"

    class Hop(pydantic.BaseModel):
        entity: str
        score: float

    class Opaque:
        def __str__(self):
            return "opaque!"

    values = ["plain", "", 3, 2.5, True, None, ["a", {"b": 1}], {"k": [1, 2]}, ("t", 1), {"s"}, Colour.RED,
              Hop(entity="Q42", score=0.5), [Hop(entity="Q1", score=1.0)], np.float32(0.25), {"n": np.int64(7)},
              Opaque(), [Opaque()], b"bytes"]
    for value in values * 2:  # the second pass is served by the cached adapters
        assert hqa_lm._serialize_for_json(value) == original(value), value
    # a prompt formatted through the adapter is the one DSPy's own function gives
    adapter, sig = dspy.ChatAdapter(), dspy.Signature("question, hops: list[dict] -> answer")
    inputs = {"question": "Who?", "hops": [{"entity": "Q42", "score": np.float32(0.5)}]}
    patched = adapter.format(sig, demos=[{**inputs, "answer": "Douglas"}], inputs=inputs)
    utils.serialize_for_json = base.serialize_for_json = original
    try:
        assert adapter.format(sig, demos=[{**inputs, "answer": "Douglas"}], inputs=inputs) == patched
    finally:
        hqa_lm.reuse_field_serializers()


def test_a_signature_s_response_format_is_built_once_with_dspy_s_schema():
    """hqa.lm.models.reuse_response_formats (issue 55): after build_lm DSPy's JSON adapter gets one response-format
    model per signature — the schema DSPy's own function builds, a fresh copy each time (an edit never reaches the
    next request) — and a new one for another signature."""
    import dspy
    from dspy.adapters import json_adapter

    from hqa.lm import models as hqa_lm

    build_lm(load_settings(NOFILE, environ={}))
    patched = json_adapter._get_structured_outputs_response_format
    assert patched.hqa_reused and patched is not patched.dspy_function
    sig = dspy.Signature("question, hops: list[str] -> answer, confidence: float")
    first, again = patched(sig), patched(sig)
    assert first is again  # built once
    dspy_schema = patched.dspy_function(sig).model_json_schema()
    assert first.model_json_schema() == dspy_schema
    first.model_json_schema()["properties"].clear()
    assert first.model_json_schema() == dspy_schema
    other = patched(sig.with_instructions("Answer briefly."))
    assert other is not first and other.model_json_schema() == dspy_schema
    hqa_lm.reuse_response_formats()  # idempotent
    assert json_adapter._get_structured_outputs_response_format is patched


def test_a_few_queries_search_the_flat_index_as_faiss_does():
    import faiss
    import numpy as np

    from hqa.retrievers.dense import FEW_QUERIES, faiss_search

    rng = np.random.default_rng(0)
    base = rng.random((500, 16), dtype=np.float32)
    index = faiss.IndexFlatIP(16)
    index.add(base)
    before = faiss.omp_get_max_threads()
    for n in (1, FEW_QUERIES + 1):
        q = rng.random((n, 16), dtype=np.float32)
        scores, ids = faiss_search(index, q, 5)
        want_scores, want_ids = index.search(q, 5)
        assert (ids == want_ids).all() and np.allclose(scores, want_scores)
    assert faiss.omp_get_max_threads() == before  # this thread's OpenMP setting is put back


def test_engine_survives_pickling_without_the_loaded_model():
    import pickle

    engine = LlamaCppEngine()
    copy = pickle.loads(pickle.dumps(engine))
    assert copy.model_path == engine.model_path and copy._llama is None


def test_user_jsonl_corpus_replaces_the_pack_passages(settings_for, tmp_path):
    from hqa.toolbox import Toolbox

    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in [
        {"title": "Zanzibar", "text": "Zanzibar is an archipelago off the coast of Tanzania."},
        {"title": "Reykjavík", "text": "Reykjavík is the capital of Iceland."},
    ]) + "\n", encoding="utf-8")
    tb = Toolbox(settings_for(text_kind="jsonl", text_path=str(corpus)))
    hits = tb.dense("What is the capital of Iceland?", k=1)
    assert hits[0].meta["title"] == "Reykjavík" and len(tb.passages) == 2
