"""Semi-Structured CoT, the program: relation linking, then the program driven by DummyLM over a fake toolbox
(SS-CoT §3.1 sampling/filter/vote, Alg. 1, Alg. 2, the parametric step, the ``sources`` orders of Table 3, the
Table 4 exemplars in the prompts, Bamboogle human demos), plus runs on the real pack."""

from __future__ import annotations

from pathlib import Path

import pytest
from sscotkit import check_well_formed

from hqa.programs import sscot_chain as C
from hqa.programs.sscot import SemiStructuredCoT
from hqa.toolbox import Toolbox


# ---------------------------------------------------------------------------------------------------------------
# the embedded LM on the real pack
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.real_lm
def test_smoke_real_lm_real_pack(settings_for):
    """The embedded LM under the JSONAdapter with ``grammar=True``: every sampled chain is in the chain language
    (none of the format errors of Appendix B), and the program runs to an answer."""
    from hqa.config import load_settings
    from hqa.app import configure_dspy

    import re

    lm = configure_dspy(load_settings(Path("/nonexistent-hqa.toml"), environ={}))
    sscot_real_tb = Toolbox(settings_for())
    program = SemiStructuredCoT(n_samples=1, toolbox=sscot_real_tb, grammar=True)
    start = len(lm.history)
    pred = program(question="What is the capital of Gabon?")
    trace = pred.trace
    check_well_formed(trace, 1)
    (parse,) = [h for h in lm.history[start:] if "masked semi-structured" in h["messages"][0]["content"]]
    (sample,) = trace["chains"]
    if parse["response"].finish_reason == "stop":  # a finished reply is in the chain language
        assert re.fullmatch(C.CHAIN_PATTERN.strip("^$"), sample["chain"]), sample
        assert not {"IncorrectTripleFormatError", "FinalAnswerFormatError", "MissingMaskNumberError"} & set(
            sample["errors"]), sample
    else:  # only a reply cut at the token budget may be unfinished
        assert parse["response"].finish_reason == "length" and parse["kwargs"]["max_tokens"] == 640
    assert isinstance(pred.answer, str) and trace["answers"]["final"] == pred.answer
    if trace["valid_chains"]:
        assert trace["voted_chain"] and trace["fallback"] is None
        assert [s["step"] for s in trace["steps"]][2:] == ["kg", "text", "model", "answer"]
    else:
        assert trace["fallback"] == "recall"
