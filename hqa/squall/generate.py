"""GenerateSparql as HumanIQ's generateQuery (HumanIQ §3, after Lehmann et al. 2023): nearest few-shots → the LM
writes SQUALL → hqa translates it to SPARQL."""

from __future__ import annotations

import re
from typing import Any

import dspy

from hqa.squall.fewshots import DEFAULT_K, entity_line, squall_fewshots
from hqa.squall.lexer import SquallSyntaxError
from hqa.squall.translate import SYNTAX_ERROR_OBSERVATION, strip_code_fence, translate


def generate_squall(predictor: Any, question: str, entities: list[str], k: int = DEFAULT_K,
                    embedder: str | None = None) -> dict[str, Any]:
    """Ask ``predictor`` (a ``dspy.Predict(GenerateSquall)``) for SQUALL with the ``k`` few-shots whose questions are
    nearest to ``question`` as its demos (after any demos an optimizer gave it), and translate the reply.

    Returns ``{"squall", "sparql", "observation", "fewshots"}``: ``sparql`` is None and ``observation`` HumanIQ's
    recorded syntax-error message when the SQUALL does not translate; otherwise ``observation`` is the SPARQL."""
    shots = squall_fewshots(embedder).nearest(question, k)
    demos = [dspy.Example(question=s.question, entities=list(s.entities), squall=s.squall) for s in shots]
    pred = predictor(question=question, entities=list(entities), demos=list(predictor.demos) + demos)
    squall = strip_code_fence(pred.squall)
    try:
        sparql: str | None = translate(squall)
    except SquallSyntaxError:
        sparql = None
    return {"squall": squall, "sparql": sparql, "observation": sparql or SYNTAX_ERROR_OBSERVATION,
            "fewshots": [s.id for s in shots]}


#: how GenerateSparql writes its query: ``squall`` (HumanIQ §3's generateQuery, the default) or ``direct`` (ablation:
#: a zero-shot SPARQL writer over candidate entities and properties, for LMs that write SPARQL well)
SPARQL_GENERATORS = ("squall", "direct")


_ENTITY_RE = re.compile(r"\b(Q\d+)\b")


def _answered(observation: str) -> bool:
    """A RunSparql observation with result rows (not the tool's failure or empty-set messages)."""
    text = (observation or "").strip()
    return text.startswith("[") and text not in ("[]", "[{}]")


def human_sparql_demo(demo: Any) -> dspy.Example | None:
    """One human solution process as a demo of the ``direct`` GenerateSparql predictor: the question, the entities
    the human found (``Qid: page title`` from each GetWikidataID, then the other QIDs given to GenerateSparql or used by
    the query), the properties of the query (ids only: the process has no labels for them), and as output the last
    query the human ran that returned rows (the human's fix when the generated one failed).  None when no query
    returned rows."""
    steps = list(getattr(demo, "steps", []) or [])
    runs = [s for s in steps if s.action == "RunSparql" and _answered(s.observation)]
    if not runs:
        return None
    entities: dict[str, str | None] = {}
    for s in steps:
        if s.action == "GetWikidataID":
            for qid in _ENTITY_RE.findall(s.observation or ""):
                entities.setdefault(qid, (s.action_input or "").strip() or None)
        elif s.action == "GenerateSparql":
            for qid in _ENTITY_RE.findall(s.action_input or ""):
                entities.setdefault(qid, None)
    query = runs[-1].action_input.strip()
    for qid in _ENTITY_RE.findall(query):  # the entities the working query uses, when no tool step named them
        entities.setdefault(qid, None)
    relations = list(dict.fromkeys(re.findall(r"\b(P\d+)\b", query)))
    return dspy.Example(question=demo.question, entities=[entity_line(q, lab, None) for q, lab in entities.items()],
                        relations=relations, sparql=query, demo_id=getattr(demo, "id", None)).with_inputs(
        "question", "entities", "relations")


class SparqlWriter:
    """The GenerateSparql predictor of a HumanIQ program (the agent and the static pipeline), as a mixin of the
    program's ``dspy.Module``: ``gen_sparql`` stays a predictor of the program, so optimizers and saved state reach
    it under the same name whichever generator is chosen."""

    def init_sparql_writer(self, sparql_generator: str = "squall", squall_k: int = DEFAULT_K) -> None:
        from hqa.errors import ConfigError
        from hqa.signatures.humaniq import GenerateSparql, GenerateSquall

        if sparql_generator not in SPARQL_GENERATORS:
            raise ConfigError(f"sparql_generator must be 'squall' or 'direct', not {sparql_generator!r}")
        self.sparql_generator, self.squall_k = sparql_generator, squall_k
        self.gen_sparql = dspy.Predict(GenerateSquall if sparql_generator == "squall" else GenerateSparql)

    def sparql_demo_builders(self) -> dict[str, Any]:
        """Human demos for ``gen_sparql`` (a ``human_demo_builders()`` entry): with the ``direct`` generator, the
        working queries of the selected processes' Wikidata halves (:func:`human_sparql_demo`; HumanIQ's per-benchmark
        late-fusion libraries), chosen by ``labeled-human`` or per question like the agent's processes.  The
        ``squall`` generator (the paper's generateQuery) takes none: its demos are the authors' SQUALL few-shots
        nearest the question (:func:`generate_squall`), and the human processes record SPARQL, not SQUALL."""
        from hqa.data.human import HumanDemoSpec

        if self.sparql_generator != "direct":
            return {}
        return {"gen_sparql": HumanDemoSpec("wikidata", human_sparql_demo, pool=2)}

    def _generate_sparql(self, question: str, entities: list[str], relations: list[str]) -> str | dict[str, Any]:
        if self.sparql_generator == "squall":
            return generate_squall(self.gen_sparql, question, entities, k=self.squall_k)
        out = self.gen_sparql(question=question, entities=entities, relations=relations).sparql
        return strip_code_fence(out)
