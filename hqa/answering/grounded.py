"""Evidence-grounded answering: the LM picks the answer among candidates drawn from the kept evidence.

:func:`evidence_candidates` lists the candidates (:mod:`hqa.answering.candidates` extracts and ranks them, each
with the line of evidence that supports it); :func:`choose` asks the LM for one of them with a ``Literal``-typed
output field, which DSPy's JSON adapter turns into a JSON-schema enum that the embedded llama.cpp engine enforces
as a grammar.  :class:`~hqa.answering.merge.SourceMerge`, HumanIQ's ending (parametric answer, then a merge of the
source answers), is grounded the same way.
"""

from __future__ import annotations

from typing import Any, Literal

import dspy

from hqa.answering.candidates import AnswerCandidate, rank_candidates
from hqa.lm.calls import NAME_ATTR, predictor_name, safe_predict
from hqa.schemas.trace import PredictError

__all__ = ["evidence_candidates", "resolve_answer_mode", "resolved", "choose", "candidate_lines"]


def evidence_candidates(question: str, evidence: list[Any], max_candidates: int = 8, *, entities=(),
                        embed=None) -> list[str]:
    """The texts of :func:`hqa.answering.candidates.rank_candidates`, best first."""
    return [c.text for c in rank_candidates(question, evidence, entities=entities, embed=embed,
                                            max_candidates=max_candidates)]


def candidate_lines(candidates: list[AnswerCandidate], max_support: int = 160) -> list[str]:
    """What the LM is shown for each candidate: ``answer — the evidence it was found in`` (support shortened)."""
    out = []
    for c in candidates:
        support = " ".join(c.support.split())
        if len(support) > max_support:
            support = support[: max_support - 1].rsplit(" ", 1)[0] + "…"
        out.append(f"{c.text} — {support}" if support else c.text)
    return out


def resolve_answer_mode(mode: str | None, settings) -> str:
    """``grounded`` or ``free``: an explicit mode wins, else ``programs.answer_mode``; ``auto`` is grounded for the
    embedded LM only."""
    mode = mode or getattr(getattr(settings, "programs", None), "answer_mode", "auto") or "auto"
    if mode == "auto":
        return "grounded" if settings.lm.provider == "local" else "free"
    return mode


def resolved(program: Any, name: str) -> Any:
    """Argument ``name`` of ``program`` as resolved from the settings when it was opened or built with its toolbox
    (:meth:`hqa.programs.base.Program.take_arguments`); a ConfigError when it never was (forward never reads the
    settings itself)."""
    value = getattr(program, name, None)
    if value is None or value == "auto":
        from hqa.errors import ConfigError

        raise ConfigError(f"{type(program).__name__}: {name} was never resolved from the settings (open the program "
                          "with hqa.app.open_program, or build it with toolbox=Toolbox(settings))")
    return value


def choose(predictor, candidates: list[str], shown: list[str] | None = None,
           **inputs: Any) -> tuple[str | None, PredictError | None]:
    """Ask ``predictor`` for one of ``candidates``: its signature with ``answer`` typed ``Literal[*candidates]``
    (its demos are kept; a ``candidates`` input, as in :class:`GroundedAnswer`, gets ``shown`` — e.g. each candidate
    with its supporting evidence — or the candidates themselves).

    ``(the candidate, None)``; ``(None, the failure)`` when the reply cannot be parsed (the caller keeps its fallback
    answer and adds the failure to its trace); ``(None, None)`` when it names no candidate.
    """
    signature = predictor.signature.with_updated_fields("answer", type_=Literal[tuple(candidates)])  # type: ignore[valid-type]
    step = dspy.Predict(signature)
    step.__dict__[NAME_ATTR] = predictor_name(predictor)  # the step is the predictor's, under its name
    step.demos = list(getattr(predictor, "demos", []) or [])
    step.lm = getattr(predictor, "lm", None)
    if "candidates" in signature.input_fields:
        inputs["candidates"] = shown or candidates
    out, error = safe_predict(step, **inputs)
    if out is None:
        return None, error
    answer = str(out.answer)
    return (answer if answer in candidates else None), None
