"""GenerateSparql as HumanIQ's generateQuery (HumanIQ §3, after Lehmann et al. 2023): nearest few-shots → the LM
writes SQUALL → hqa translates it to SPARQL."""

from __future__ import annotations

import re
from typing import Any

import dspy

from hqa.squall.fewshots import DEFAULT_K, squall_fewshots
from hqa.squall.lexer import SquallSyntaxError
from hqa.squall.translate import SYNTAX_ERROR_OBSERVATION, translate


def generate_squall(predictor: Any, question: str, entities: list[str], k: int = DEFAULT_K,
                    embedder: str | None = None) -> dict[str, Any]:
    """Ask ``predictor`` (a ``dspy.Predict(GenerateSquall)``) for SQUALL with the ``k`` few-shots whose questions are
    nearest to ``question`` as its demos (after any demos an optimizer gave it), and translate the reply.

    Returns ``{"squall", "sparql", "observation", "fewshots"}``: ``sparql`` is None and ``observation`` HumanIQ's
    recorded syntax-error message when the SQUALL does not translate; otherwise ``observation`` is the SPARQL."""
    shots = squall_fewshots(embedder).nearest(question, k)
    demos = [dspy.Example(question=s.question, entities=list(s.entities), squall=s.squall) for s in shots]
    pred = predictor(question=question, entities=list(entities), demos=list(predictor.demos) + demos)
    squall = re.sub(r"^```\w*|```$", "", str(pred.squall or "").strip()).strip()
    try:
        sparql: str | None = translate(squall)
    except SquallSyntaxError:
        sparql = None
    return {"squall": squall, "sparql": sparql, "observation": sparql or SYNTAX_ERROR_OBSERVATION,
            "fewshots": [s.id for s in shots]}
