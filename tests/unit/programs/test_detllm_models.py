"""DETLLM's models (DIVKNOWQA §3.2-3.3): Contriever as ``dense_model`` from the local Hugging Face cache (one clear
line when it is not there), and the cross-encoder's bi-encoder fallback announced once per process.

The Contriever test builds a tiny BERT (random weights, a 20-word vocabulary) into a temporary Hugging Face cache
under Contriever's hub id, so the real loading path — cache lookup, ``transformers`` loading offline, mean pooling
over the attention mask — runs without the 440 MB checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path

import dspy
import numpy as np
import pytest
from conftest import KeepOrderReranker, ScriptedLinker, ScriptedSparql
from dspy.utils import DummyLM

from hqa.errors import ConfigError
from hqa.retrievers.embedding import encoders as E

WORDS = ["gabon", "libreville", "capital", "africa", "is", "the", "of", "country", "continent", "city", "in", "a"]


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delitem(E._MODELS, E.CONTRIEVER, raising=False)
    yield cache
    E._MODELS.pop(E.CONTRIEVER, None)


def fake_contriever(cache: Path) -> Path:
    """A tiny BERT saved in the hub cache layout as facebook/contriever-msmarco."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(0)
    repo = cache / "models--facebook--contriever-msmarco"
    rev = "0" * 40
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    vocab = snap / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(str(snap))
    config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=32)
    BertModel(config).eval().save_pretrained(str(snap))
    return snap


def test_contriever_not_in_the_cache_is_one_clear_line(hub_cache):
    from hqa.programs.detllm import DETLLM

    for name in ("contriever", "facebook/contriever-msmarco"):
        with pytest.raises(ConfigError) as err:
            DETLLM(dense_model=name)
        message = str(err.value)
        assert "\n" not in message and "facebook/contriever-msmarco" in message and str(hub_cache) in message
        assert "local Hugging Face cache" in message
    assert DETLLM().dense_model == ""  # the default: the toolbox's configured dense retriever


def test_contriever_in_the_cache_loads_offline_with_mean_pooling(hub_cache, tmp_path):
    import torch
    from transformers import AutoModel, AutoTokenizer

    snap = fake_contriever(hub_cache)
    assert E.resolve_dense_model("contriever") == E.CONTRIEVER
    texts = ["the capital of gabon", "libreville is a city in africa"]
    got = E.embed(texts, "contriever")
    # the reference: Contriever's pooling (mean of the last hidden states over the attention mask), normalised
    tok, model = AutoTokenizer.from_pretrained(str(snap)), AutoModel.from_pretrained(str(snap)).eval()
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    ref = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    assert got.shape == (2, 8) and np.allclose(got, ref, atol=1e-5)
    assert isinstance(E.get_embedder("contriever"), E.ContrieverEmbedder)


def test_detllm_searches_passages_with_contriever_when_asked(hub_cache, tmp_path):
    from hqa.config import load_settings
    from hqa.programs.detllm import DETLLM
    from hqa.toolbox import Toolbox

    fake_contriever(hub_cache)
    passages = [{"id": "p1", "title": "Gabon", "text": "gabon is a country in africa"},
                {"id": "p2", "title": "Libreville", "text": "libreville is the capital of gabon"}]

    def not_this(query, k=5):
        raise AssertionError("the toolbox's own dense retriever must not be asked")

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path))
    detllm_ctr_tb = Toolbox(settings, dense=not_this, bm25=lambda q, k=5: [], reranker=KeepOrderReranker(),
                        passages=passages, linker=ScriptedLinker({}), sparql=ScriptedSparql())
    program = DETLLM(hops=1, samples=1, dense_model="contriever", toolbox=detllm_ctr_tb)
    lm = DummyLM([{"rationale": "r", "search_query": "capital of gabon", "query_entity": "None", "sparql": "None"},
                  {"rationale": "r", "answer": "Libreville"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = program(question="What is the capital of Gabon?")
    assert {p["meta"]["id"] for p in pred.trace["passages"]} == {"p1", "p2"}
    assert list((tmp_path / "index" / "detllm-text-dense").glob("dense-*.faiss"))  # persisted like every index


def test_cross_encoder_fallback_is_announced_once_per_process(caplog, tmp_path):
    from hqa.retrievers.base import Evidence
    from hqa.retrievers.rerank import Reranker

    missing = str(tmp_path / "no-such-cross-encoder")
    items = [Evidence(text="Libreville is the capital of Gabon.", source="text"),
             Evidence(text="Africa is a continent.", source="text")]
    with caplog.at_level(logging.WARNING, logger="hqa"):
        for _ in range(3):  # three questions, each with its own reranker instance (as separate toolboxes would)
            ranked = Reranker(model=missing).rerank("capital of Gabon", items, k=2)
            assert ranked[0].meta["reranker"] == "bi-encoder"
    said = [r.getMessage() for r in caplog.records if "cannot load cross-encoder" in r.getMessage()]
    assert len(said) == 1 and "rest of this process" in said[0]
