"""The first hybrid program (closed book + one retrieval hop) and the closed-book baselines, with DummyLM."""

import dspy
import pytest

from hqa.programs.closedbook import ClosedBook
from hqa.programs.simple import SimpleHybrid
from hqa.toolbox import Toolbox


@pytest.mark.real_lm
def test_smoke_real_lm_and_real_store(settings_for):
    """The whole path with the embedded SmolLM2 and the real Oxigraph store, dense index, BM25 and reranker."""
    from hqa.lm.models import build_lm

    settings = settings_for()
    simple_real_tb = Toolbox(settings)
    lm = build_lm(settings)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = SimpleHybrid(toolbox=simple_real_tb)(question="Who is the author of Animal Farm?")
    t = pred.trace
    assert isinstance(pred.answer, str) and pred.answer
    assert t["sparql"] and t["sparql"][0]["rows"]  # the real store answered the one-hop query
    assert any("George Orwell" in e["text"] for e in t["evidence"])  # right evidence retrieved for the LM


@pytest.mark.real_lm
def test_cot_smoke_real_lm():
    from hqa.config import load_settings
    from hqa.lm.models import build_lm

    lm = build_lm(load_settings(environ={}))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = ClosedBook(cot=True)(question="What is the capital of France?")
    assert isinstance(pred.answer, str) and "reasoning" in pred.trace["steps"][0]
