"""Signatures of Semi-Structured Chain-of-Thought (Su et al. 2023).  Field names follow the exemplar blocks of
SS-CoT Table 4 (``Question`` / ``Reasoning Chain``, ``Triplet`` / ``Question``, ``Context`` / ``Question`` /
``Answer``, ``Filled reasoning chain``); the exemplars themselves are data (``hqa/data/sscot/``)."""

from __future__ import annotations

from typing import Any

import dspy
from pydantic_core import core_schema

# The SS-CoT chain language (hqa.programs.sscot_chain parses it) as one regular expression, for grammar-constrained
# decoding (SS-CoT does not constrain its decoder; hqa's option for small LMs, see SemiStructuredCoT(grammar=True)).  A slot is 1-40 characters other than
# ; > # " \ [ ] { } or a line break, or masks #1-#9; 1-4 triples (Appendix B: rarely more than four hops); the final
# answer #answer or #1-#9.  The chain starts with a letter or a mask, and holds no bracket or brace: DSPy reads a
# reply value that starts like JSON (a digit or a bracket) as JSON, and json_repair pulls a list or an object out of
# a bracket or brace anywhere in it (a chain with "[Gabon]" in a slot became ['Gabon'] and failed to parse); the
# length bounds keep a rambling small model inside the reply's token budget; double quotes are left out because the
# pattern is applied to the JSON-encoded text.
_CHAR = r'([^;>#"\\\n\[\]{}]|#[1-9])'
_SLOT = _CHAR + "{1,40}"
_TRIPLE = f"{_SLOT} >> {_SLOT} >> {_SLOT}"
CHAIN_PATTERN = (f"^([A-Za-z]|#[1-9]){_CHAR}{{0,39}} >> {_SLOT} >> {_SLOT}(; {_TRIPLE}){{0,3}}; "
                 "final answer: #(answer|[1-9])$")


class ChainText(str):
    """A reasoning chain whose JSON schema carries :data:`CHAIN_PATTERN`: under DSPy's
    JSONAdapter a grammar-backed LM (the embedded engine, :mod:`hqa.lm.models`) can then write nothing but the chain
    language.  Validation accepts any text (the Appendix-B filter judges it), but not a value DSPy already decoded
    as JSON into something else: that reply fails to parse instead of becoming a made-up chain."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(cls, core_schema.str_schema(strict=True))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict[str, Any]:
        return {"type": "string", "pattern": CHAIN_PATTERN}


class ParseChain(dspy.Signature):
    """Parse the question into a masked semi-structured reasoning chain: triples written head >> relation >> tail,
    separated by '; ', ending with 'final answer: #answer' (or 'final answer: #n' when mask #n is the answer).
    Unknown entities or values are masks #1, #2, ... numbered in ascending order; a mask may stand alone or inside
    free text. Only the head or the tail may hold a mask, never the relation, and every triple holds one."""

    question: str = dspy.InputField()
    reasoning_chain: str = dspy.OutputField(desc="head >> relation >> #1; #1 >> relation >> #2; final answer: #answer")


#: ``ParseChain`` with the grammar-carrying output type (``SemiStructuredCoT(grammar=True)``)
ParseChainConstrained = ParseChain.with_updated_fields("reasoning_chain", type_=ChainText)


class TripleToQuestion(dspy.Signature):
    """Convert the triplet (head, relation, ?) into one simple single-hop question whose answer is the '?'."""

    triplet: str = dspy.InputField(desc='("head", "relation", ?)')
    question: str = dspy.OutputField()


class AnswerFromContext(dspy.Signature):
    """Answer the question from the context only, with a short answer (an entity name, a date, a number, yes/no).
    If the context does not contain the answer, reply exactly: unknown."""

    context: list[str] = dspy.InputField(desc="retrieved documents")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="short answer, or 'unknown'")


class FillChain(dspy.Signature):
    """Fill every remaining mask (#1, #2, ..., #answer) of the reasoning chain from your own knowledge. Copy the
    chain with each mask replaced by its value, keeping the 'head >> relation >> tail; ...; final answer: ...'
    format, and end with the final answer to the question."""

    question: str = dspy.InputField()
    reasoning_chain: str = dspy.InputField(desc="the chain, masks filled so far written in")
    filled_reasoning_chain: str = dspy.OutputField(desc="the chain with no mask left; final answer: <answer>")


class RecallAnswer(dspy.Signature):
    """Answer the question from your own knowledge. Reply with a short answer only: an entity name, a date, a
    number, or yes/no. No explanation."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="short answer")


__all__ = ["AnswerFromContext", "ChainText", "FillChain", "ParseChain", "ParseChainConstrained", "RecallAnswer",
           "TripleToQuestion"]
