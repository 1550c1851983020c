"""DETLLM's scripted runs shared by the DETLLM tests: one hop's plan and answer replies, the single-query program,
and a run under a DummyLM."""

from __future__ import annotations

import dspy
from dspy.utils import DummyLM

from hqa.programs.detllm import DETLLM

Q = "Which continent is the country whose capital is Libreville in?"


HOP_KEYS = {"hop", "rationale", "search_query", "query_entity", "linked_entities", "sparql", "sparql_ok",
            "sparql_rows", "n_by_source", "kept"}


def ans(answer, rationale="step by step"):
    return {"rationale": rationale, "answer": answer}


def one_query(**kw):
    """DETLLM with one query per hop (``samples=1``, the single-query ablation): one scripted reply per hop."""
    kw.setdefault("samples", 1)
    return DETLLM(**kw)


def plan(search, entity="Gabon", sparql="None", rationale="need more"):
    return {"rationale": rationale, "search_query": search, "query_entity": entity, "sparql": sparql}


def run(program, answers, question=Q):
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question), lm
