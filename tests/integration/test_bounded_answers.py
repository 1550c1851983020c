"""Bounded free text: with the embedded small LM, an answer is cut to its first sentence and stopped where it starts
repeating itself (DETLLM once answered with over 1,000 characters of one repeated sentence); remote LMs keep theirs.
The one place this happens is :func:`hqa.scoring.answers.clean_answer`."""

from __future__ import annotations

import dspy
from conftest import KeepOrderReranker
from lmkit import ScriptLM

from hqa.programs import build_program
from hqa.toolbox import Toolbox
from standins.servers import free_port

LOOP = "Guillermo del Toro directed The Shape of Water. " * 25  # 1,200 characters of one sentence
EMBEDDED = "local/SmolLM2-135M-Instruct-Q8_0"  # what build_lm names the embedded model


def test_detllm_answer_of_the_embedded_model_is_bounded(settings_for, tmp_path):
    """The issue's case: DETLLM's final answer, with every source down (nothing listening) so only the LM speaks."""
    base = f"http://127.0.0.1:{free_port()}"
    settings = settings_for(text_kind="wikipedia", text_endpoint=base + "/w/api.php", linker_kind="wikidata",
                            linker_endpoint=base + "/wikidata/api.php", kg_kind="sparql", kg_endpoint=base + "/sparql",
                            http_cache_path=str(tmp_path / "http.sqlite"), http_max_retries=0, http_timeout=2.0)
    bounded_detllm_tb = Toolbox(settings, reranker=KeepOrderReranker())
    lm = ScriptLM()
    lm.fixed["answer"] = LOOP
    lm.model = EMBEDDED
    lm.reset()
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = build_program("detllm",
                             toolbox=bounded_detllm_tb)(question="Who directed The Shape of Water?")
    assert pred.answer == "Guillermo del Toro directed The Shape of Water"
