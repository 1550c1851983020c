"""Semi-Structured CoT: the chain filter (exhaustively), canonical forms and voting, fill order, relation linking,
and the program driven by DummyLM over a fake toolbox, plus one smoke run with the embedded LM on the real pack."""

from __future__ import annotations

import itertools
from pathlib import Path

import dspy
import pytest
from conftest import ScriptedSparql
from dspy.utils import DummyLM

from hqa.programs import sscot_chain as C
from hqa.programs.sscot import SemiStructuredCoT, hop_question, is_unknown
from hqa.retrievers.base import Evidence
from hqa.retrievers.entities import EntityLinker
from hqa.retrievers.registry import Toolbox, use_toolbox
from hqa.retrievers.relations import WELL_KNOWN_PROPERTIES, RelationLinker, relation_linker_for

CITI = "(Citibank, inception, #1); (#2, position held, President of the United States); (#2, start time, #1)"


# ---------------------------------------------------------------------------------------------------------------
# the syntactic filter
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chain", [
    CITI,
    "(Gabon, capital, #1)",
    "Chain: (Gabon, capital, #1)",
    "chain = (Gabon, capital, #1)",
    "[(Gabon, capital, #1), (#1, population, #2)]",
    "`(Gabon, capital, #1)`",
    '"(Gabon, capital, #1)"',
    "(Gabon, capital, # 1)",
    "(Gabon, capital, #1)\n(#1, population, #2)",
    "(Gabon, capital, #1) -> (#1, population, #2).",
    "(Gabon, capital, #1) | (#1, population, #2)",
    '("Washington, D.C.", capital of, #1)',
    "(Paris (film), director, #1)",
    "(C#, designed by, #1)",
    "(#1, key, F# minor)",
    "(#2, r, A); (#1, s, #2)",  # masks introduced out of order are fine (renumbered for voting)
    "(A, r, #1); (#1, s, #2); (#2, t, #3)",
    "(#1, r, A); (#1, s, B)",
])
def test_valid_chains(chain):
    assert C.validate(chain) == []
    assert C.is_valid(chain)


@pytest.mark.parametrize("chain", [
    "", "   ", None, "foo", "Libreville", "(a, b)", "(a, b, c, d)", "(a, , #1)", "( , r, #1)", "(a, b, #1) hello",
    "The chain is (a, r, #1)", "((a, r, #1)", "(a, r, #1))", ")(a, r, #1)", '("a, r, #1)',
    "(#1's father, r, A)", "(the #2, r, #1)", "(A, r, #1#2)", "(Gabon, capital, #1); Libreville",
])
def test_malformed(chain):
    assert C.validate(chain) == ["malformed"]
    assert C.canonical(chain) is None
    with pytest.raises(C.ChainSyntaxError):
        C.parse_chain(chain)


@pytest.mark.parametrize("chain, errors", [
    # missing_mask_number
    ("(Gabon, capital, #)", ["missing_mask_number"]),
    ("(#, capital, Gabon)", ["missing_mask_number"]),
    ("(Gabon, capital, #x)", ["missing_mask_number"]),
    ("(Gabon, capital, #?)", ["missing_mask_number"]),
    ("(Gabon, capital, #1); (#1, population, #)", ["missing_mask_number"]),
    ("(A, #, #1)", ["missing_mask_number", "masked_relation"]),
    # masked_relation
    ("(Gabon, #1, Libreville)", ["masked_relation", "unmasked_triple"]),
    ("(Gabon, #1, #2); (#2, r, #1)", ["masked_relation"]),
    ("(A, #, B)", ["missing_mask_number", "masked_relation", "unmasked_triple"]),
    # unmasked_triple
    ("(Gabon, capital, Libreville)", ["unmasked_triple"]),
    ("(A, r, #1); (B, s, C)", ["unmasked_triple"]),
    ("(B, s, C); (A, r, #1)", ["unmasked_triple"]),
    # mask_underflow
    ("(#0, r, A)", ["mask_underflow"]),
    ("(A, r, #2); (#2, s, #3); (#3, t, B)", ["mask_underflow"]),
    ("(A, r, #0); (#0, s, #1)", ["mask_underflow"]),
    # discontinuous_mask
    ("(A, r, #1); (#1, s, #3); (#3, t, B)", ["discontinuous_mask"]),
    ("(A, r, #1); (#1, s, #3); (#3, t, #4); (#4, u, B)", ["discontinuous_mask"]),
    # mask_overflow
    ("(#1, r, #2)", ["mask_overflow"]),
    ("(A, r, #1); (#2, s, #3)", ["mask_overflow"]),
    ("(A, r, #1); (#1, s, #2); (#2, t, #3); (#3, u, #4); (#4, v, #5)", []),
    ("(A, r, #1); (#1, s, #2); (#2, t, #3); (#3, u, #4); (#4, v, #5); (#5, w, #6); (#6, x, #7)", []),
    # combinations
    ("(#2, r, A)", ["mask_underflow", "mask_overflow"]),
    ("(#2, r, A); (B, s, #4)", ["mask_underflow", "discontinuous_mask", "mask_overflow"]),
    ("(A, r, #1); (#3, s, B)", ["discontinuous_mask", "mask_overflow"]),
    ("(A, #3, B)", ["masked_relation", "unmasked_triple", "mask_underflow", "mask_overflow"]),
    ("(A, r, #1); (B, s, C); (#1, t, #)", ["missing_mask_number", "unmasked_triple"]),
    ("(#, r, #1); (A, #2, B)", ["missing_mask_number", "masked_relation", "unmasked_triple"]),
    ("(A, r, #2); (B, s, C); (#2, #5, D)",
     ["masked_relation", "unmasked_triple", "mask_underflow", "discontinuous_mask", "mask_overflow"]),
])
def test_error_types(chain, errors):
    assert C.validate(chain) == errors
    assert errors == [e for e in C.ERROR_TYPES if e in errors]  # reported in ERROR_TYPES order


def _reference_errors(triples: list[tuple[str, str, str]]) -> list[str]:
    """The filter rules restated independently over pre-tokenised slots ('#' = bare, '#n' = numbered)."""
    def numbered(s):
        return int(s[1:]) if s.startswith("#") and s[1:].isdigit() else None

    errs = set()
    nums = {numbered(s) for t in triples for s in t} - {None}
    if any(s == "#" for t in triples for s in t):
        errs.add("missing_mask_number")
    if any(t[1].startswith("#") for t in triples):
        errs.add("masked_relation")
    if any(not t[0].startswith("#") and not t[2].startswith("#") for t in triples):
        errs.add("unmasked_triple")
    if nums:
        s = sorted(nums)
        if s[0] != 1:
            errs.add("mask_underflow")
        if any(b - a > 1 for a, b in zip(s, s[1:])):
            errs.add("discontinuous_mask")
        if s[-1] > len(triples):
            errs.add("mask_overflow")
    return [e for e in C.ERROR_TYPES if e in errs]


def test_filter_exhaustive_over_small_chains():
    """Every chain of one or two triples over the slot alphabet {A, #, #1, #2, #3} (15,750 chains)."""
    alphabet = ["A", "#", "#1", "#2", "#3"]
    slots = list(itertools.product(alphabet, repeat=3))
    n = 0
    for size in (1, 2):
        for combo in itertools.product(slots, repeat=size):
            text = "; ".join(f"({h}, {r}, {t})" for h, r, t in combo)
            assert C.validate(text) == _reference_errors(list(combo)), text
            n += 1
    assert n == 125 + 125 ** 2


def test_parse_details():
    t = C.parse_chain('  chain: ( "Washington, D.C." ,  capital   of , # 1 ) ; (#1, "population", #2)')
    assert t == [C.Triple("Washington, D.C.", "capital of", "#1"), C.Triple("#1", "population", "#2")]
    assert C.mask_number("#12") == 12 and C.mask_number(" # 3 ") == 3 and C.mask_number("A#1") is None
    assert C.is_bare_mask("#") and C.is_bare_mask("#x") and not C.is_bare_mask("C#") and not C.is_bare_mask("#1")
    assert C.has_mask("#2") and C.has_mask("#") and not C.has_mask("F# minor")
    assert C.parse_chain(t) is t
    assert C.try_parse("nope") is None


# ---------------------------------------------------------------------------------------------------------------
# canonical forms and voting
# ---------------------------------------------------------------------------------------------------------------
def test_canonical_normalises_case_space_and_mask_numbers():
    a = "(Citibank ,  Inception, #1); (#2, position held,President of the United States); (#2, start time, #1)"
    assert C.canonical(a) == C.canonical(CITI)
    assert C.canonical(CITI) == ("(citibank, inception, #1); (#2, position held, president of the united states); "
                                 "(#2, start time, #1)")
    # masks renumbered by first appearance
    assert C.canonical("(#2, a, X); (#1, b, #2)") == C.canonical("(#1, a, X); (#2, b, #1)") == "(#1, a, x); (#2, b, #1)"
    assert C.normalized("(#2, a,  X); (#1, b, #2)") == "(#1, a, X); (#2, b, #1)"
    assert C.canonical("(A, r, #1)") != C.canonical("(#1, r, A)")
    # a slot with a comma survives the round trip
    text = C.normalized('("Washington, D.C.", capital of, #1)')
    assert C.parse_chain(text) == [C.Triple("Washington, D.C.", "capital of", "#1")]


def test_vote_majority_and_ties():
    v = C.vote(["(A, r, #1)", "(B, r, #1)", "(b,  R, #1)"])
    assert v.winner == 1 and v.canonical == "(b, r, #1)"
    assert v.counts == [("(b, r, #1)", 2, 1), ("(a, r, #1)", 1, 0)]
    # a tie goes to the chain seen first
    v = C.vote(["(B, r, #1)", "(A, r, #1)", "(a, r, #1)", "(b, r, #1)"])
    assert v.winner == 0 and [c[1] for c in v.counts] == [2, 2] and v.counts[0][0] == "(b, r, #1)"
    v = C.vote(["(A, r, #1)", "(B, r, #1)", "(C, r, #1)"])
    assert v.winner == 0 and [c[2] for c in v.counts] == [0, 1, 2]
    # malformed chains do not vote
    v = C.vote(["junk", "(C, r, #1)"])
    assert v.winner == 1 and v.counts == [("(c, r, #1)", 1, 1)]
    assert C.vote([]) is None and C.vote(["junk"]) is None


# ---------------------------------------------------------------------------------------------------------------
# fill order
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chain, order", [
    (CITI, [(0, 1), (1, 2)]),
    ("(Gabon, capital, #1)", [(0, 1)]),
    ("(A, r, #1); (#1, s, #2); (#2, t, #3)", [(0, 1), (1, 2), (2, 3)]),
    ("(#1, r, #2); (A, s, #1)", [(1, 1), (0, 2)]),  # the leftmost fillable triple, rescanned after every fill
    ("(#2, r, A); (#1, s, #2)", [(0, 2), (1, 1)]),
    ("(A, r, #1); (B, s, #1)", [(0, 1)]),  # the second triple is a constraint, never a filler
    ("(#1, r, #2); (#2, s, #1)", []),  # no anchor: nothing is fillable
    ("(#1, r, #2)", []),
    ("(A, #1, #2); (B, r, #1)", [(1, 1)]),  # a masked relation never fills
    ("(A, r, #); (B, s, #1)", [(1, 1)]),  # nor a bare mask
    ("(A, r, B); (C, s, #1)", [(1, 1)]),
])
def test_fill_order(chain, order):
    assert C.fill_order(chain) == order
    assert C.fill_order(C.parse_chain(chain)) == order


def test_unfilled_masks():
    t = C.parse_chain("(#1, r, #2); (#2, s, #1); (A, t, #3)")
    assert C.unfilled(t, C.fill_order(t)) == [1, 2]
    assert C.masks(C.parse_chain("(#2, r, A); (#1, s, #2)")) == [2, 1]


# ---------------------------------------------------------------------------------------------------------------
# relation linking
# ---------------------------------------------------------------------------------------------------------------
PROPS = [
    {"id": "P571", "label": "inception", "description": "date or point in time when something was founded"},
    {"id": "P39", "label": "position held", "description": ""},
    {"id": "P580", "label": "start time", "description": ""},
    {"id": "P36", "label": "capital", "description": ""},
    {"id": "P1376", "label": "capital of", "description": ""},
    {"id": "P1082", "label": "population", "description": ""},
]


def test_relation_linker_stages():
    rl = RelationLinker(PROPS)
    assert rl.link("inception") == [("P571", "inception", 1.0)]
    assert rl.link("  Position   Held ") == [("P39", "position held", 1.0)]
    assert rl.link("capital of")[0] == ("P1376", "capital of", 1.0)  # as written beats the trimmed variant
    assert rl.link("is the capital of")[0] == ("P36", "capital", 0.95)
    for phrase in ("populaton", "population size", "the total population of"):
        fuzzy = rl.link(phrase)
        assert fuzzy and fuzzy[0][0] == "P1082" and 0.5 < fuzzy[0][2] < 0.95, phrase
    assert rl.link("wdt:P36") == [("P36", "capital", 1.0)]
    assert rl.link("P999") == [("P999", "P999", 1.0)]
    assert rl.link("the") == [] and rl.link("") == [] and rl.link("zzzqqq") == []
    assert len(rl.link("capital of", k=1)) == 1


def test_relation_linker_embedding_stage_is_injected():
    calls = []

    def sim(query, texts):
        calls.append((query, texts))
        return [0.9 if t.startswith("inception") else 0.1 for t in texts]

    rl = RelationLinker(PROPS, similarity=sim)
    assert rl.link("year it was established") == [("P571", "inception", 0.72)]
    assert calls and any(t.startswith("inception: date or point") for t in calls[0][1])
    calls.clear()
    assert rl.link("inception")[0][0] == "P571" and not calls  # exact match never reaches the embedding stage
    assert RelationLinker(PROPS, similarity=lambda q, ts: [0.2] * len(ts)).link("year it was established") == []


def test_relation_linker_from_linker_and_toolbox_cache(tmp_path):
    linker = EntityLinker([{"id": "Q1", "label": "Thing"}, {"id": "P36", "label": "capital city (pack)"},
                           {"id": "P571", "label": "inception"}])
    rl = RelationLinker.from_linker(linker)
    assert rl.label("P36") == "capital city (pack)"  # the pack label wins
    assert rl.link("capital")[0][0] == "P36"  # alias/label from the well-known table
    assert rl.link("founded")[0][0] == "P571"  # well-known alias merged into the pack record
    assert "Q1" not in rl.properties and "P19" in rl.properties
    assert "P19" not in RelationLinker.from_linker(linker, well_known=False).properties
    assert all(p["id"].startswith("P") for p in WELL_KNOWN_PROPERTIES)

    from hqa.config import load_settings

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={})
    tb = Toolbox(settings, linker=linker)
    assert relation_linker_for(tb) is relation_linker_for(tb)
    injected = RelationLinker(PROPS)
    assert relation_linker_for(Toolbox(settings, linker=linker, relations=injected)) is injected


# ---------------------------------------------------------------------------------------------------------------
# the program with DummyLM and a fake toolbox
# ---------------------------------------------------------------------------------------------------------------
class FakeDense:
    def __init__(self, passages: list[str]):
        self.passages = passages
        self.queries: list[str] = []

    def __call__(self, query, k=5):
        self.queries.append(query)
        return [Evidence(text=t, source="text", score=1.0 - i / 10, meta={"id": f"p{i}"})
                for i, t in enumerate(self.passages[:k])]


class FakeLinker(EntityLinker):
    """A fixed QID for the few names the tests use; property records for the relation linker."""

    FIXED = {"citibank": ("Q219508", "Citibank"), "president of the united states": ("Q11696", "President of the US"),
             "gabon": ("Q1000", "Gabon")}

    def __init__(self):
        super().__init__(PROPS + [{"id": q, "label": lab} for q, lab in self.FIXED.values()])
        self.mentions: list[str] = []

    def link(self, mention, question=None, k=5):
        from hqa.retrievers.entities import Candidate

        self.mentions.append(mention)
        hit = self.FIXED.get(str(mention).strip().lower())
        return [Candidate(hit[0], hit[1], "", 1.0, mention)] if hit else []


WD = "http://www.wikidata.org/entity/"


def make_toolbox(name, responses=None, labels=None, passages=()):
    from hqa.config import load_settings

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={})
    tb = Toolbox(settings, linker=FakeLinker(), sparql=ScriptedSparql(responses or {}, labels),
                 dense=FakeDense(list(passages)))
    return use_toolbox(tb, name=name)


def run(program, question, answers):
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = program(question=question)
    return pred, lm


def parse_calls(lm):
    return [h for h in lm.history if "Break the question into a chain" in h["messages"][0]["content"]]


def check_well_formed(trace, n_samples):
    assert trace["program"] == "sscot"
    assert len(trace["chains"]) == n_samples
    for s in trace["chains"]:
        assert set(s) >= {"sample", "chain", "errors", "canonical"}
        assert all(e in C.ERROR_TYPES for e in s["errors"])
    assert trace["valid_chains"] == [s["chain"] for s in trace["chains"] if not s["errors"]]
    for f in trace["fills"]:
        assert f["via"] in ("kg", "text", "lm") and f["mask"].startswith("#")
        assert set(f) >= {"mask", "triple", "via", "value", "attempts"}
    assert set(trace["answers"]) == {"parametric", "text", "kg", "final"}


def test_program_votes_filters_and_fills_kg_then_text():
    tb = make_toolbox(
        "sscot-a",
        responses={"wd:Q219508 wdt:P571 ?x": [{"x": "1812-06-16T00:00:00Z"}]},  # P39 for #2: nothing in the KG
        passages=["James Madison was president of the United States from 1809 to 1817."],
    )
    chains = [
        CITI,
        "(Citibank, inception, #)",
        "(#2, founded by, Citibank)",
        "(citibank,  Inception, #1); (#2, position held, president of the United States); (#2, start time, #1)",
        "(Citibank, founded by, #1)",
    ]
    answers = [{"chain": c} for c in chains] + [{"answer": "James Madison"}, {"answer": "James Madison"}]
    program = SemiStructuredCoT(n_samples=5, toolbox="sscot-a")
    pred, lm = run(program, "Who was president of the US in the year Citibank was founded?", answers)
    trace = pred.trace
    check_well_formed(trace, 5)

    # five distinct sampled parse calls, each with its own rollout id at the sampling temperature
    calls = parse_calls(lm)
    assert len(calls) == 5
    assert [h["kwargs"]["rollout_id"] for h in calls] == [0, 1, 2, 3, 4]
    assert all(h["kwargs"]["temperature"] == 0.7 for h in calls)
    assert len(lm.history) == 7  # 5 parses + 1 read + 1 answer; no recall

    assert [s["errors"] for s in trace["chains"]] == [
        [], ["missing_mask_number"], ["mask_underflow", "mask_overflow"], [], []]
    assert trace["valid_chains"] == [chains[0], chains[3], chains[4]]
    assert trace["voted_chain"] == CITI and trace["voted_sample"] == 0
    assert [(v["count"], v["first_sample"]) for v in trace["votes"]] == [(2, 0), (1, 4)]

    assert trace["fill_order"] == [{"triple": 0, "mask": "#1"}, {"triple": 1, "mask": "#2"}]
    f1, f2 = trace["fills"]
    assert (f1["mask"], f1["via"], f1["value"]) == ("#1", "kg", "1812-06-16")
    assert f1["sparql"] == "SELECT DISTINCT ?x WHERE { wd:Q219508 wdt:P571 ?x . } LIMIT 20"
    assert (f2["mask"], f2["via"], f2["value"]) == ("#2", "text", "James Madison")
    assert f2["attempts"][0]["via"] == "kg" and f2["attempts"][0]["reason"] == "empty result"
    assert "?x wdt:P39 wd:Q11696" in f2["attempts"][0]["queries"][0]
    assert f2["question"] == "Who or what has position held President of the United States?"
    assert trace["unfilled"] == []
    assert trace["filled_chain"] == ["(Citibank, inception, 1812-06-16)",
                                     "(James Madison, position held, President of the United States)",
                                     "(James Madison, start time, 1812-06-16)"]
    assert trace["answers"] == {"parametric": None, "text": "James Madison", "kg": None, "final": "James Madison"}
    assert pred.answer == "James Madison"
    assert len(trace["sparql"]) == 2 and trace["passages"][0]["mask"] == "#2"


def test_program_kg_chain_reuses_ids_and_labels():
    tb = make_toolbox(
        "sscot-b",
        responses={"wd:Q1000 wdt:P36 ?x": [{"x": WD + "Q3825"}], "wd:Q3825 wdt:P1082 ?x": [{"x": "703904"}]},
        labels={"Q3825": "Libreville"},
    )
    chain = "(Gabon, capital, #1); (#1, population, #2)"
    program = SemiStructuredCoT(n_samples=2, toolbox="sscot-b")
    pred, lm = run(program, "How many people live in the capital of Gabon?",
                   [{"chain": chain}, {"chain": chain}, {"answer": "703904"}])
    t = pred.trace
    check_well_formed(t, 2)
    assert [f["via"] for f in t["fills"]] == ["kg", "kg"]
    assert t["fills"][0]["value"] == "Libreville" and t["fills"][0]["ids"] == ["Q3825"]
    assert t["fills"][1]["attempts"][0]["entities"] == ["Q3825"]  # the filled mask's KG id, not re-linked
    assert tb.linker.mentions == ["Gabon"]
    assert t["answers"]["kg"] == "703904" and t["answers"]["text"] is None
    assert t["filled_chain"] == ["(Gabon, capital, Libreville)", "(Libreville, population, 703904)"]
    assert len(lm.history) == 3 and pred.answer == "703904"


def test_program_text_unknown_falls_to_lm():
    make_toolbox("sscot-c", passages=["Gabon is a country in Central Africa."])
    chain = "(Gabon, capital, #1)"
    program = SemiStructuredCoT(n_samples=2, toolbox="sscot-c")
    pred, lm = run(program, "What is the capital of Gabon?",
                   [{"chain": chain}, {"chain": chain}, {"answer": "Unknown."}, {"answer": "Libreville"},
                    {"answer": "Libreville"}])
    t = pred.trace
    (fill,) = t["fills"]
    assert fill["via"] == "lm" and fill["value"] == "Libreville"
    assert [a["via"] for a in fill["attempts"]] == ["kg", "text", "lm"]
    assert fill["attempts"][0]["reason"] == "empty result"  # Gabon + capital linked, the KG had no row
    assert fill["attempts"][1]["answer"] == "Unknown" and fill["attempts"][1]["reason"] == "reader found no answer"
    assert fill["question"] == "What is the capital of Gabon?"
    assert t["answers"] == {"parametric": "Libreville", "text": None, "kg": None, "final": "Libreville"}
    assert t["votes"] == [{"chain": "(gabon, capital, #1)", "count": 2, "first_sample": 0}]
    assert len(lm.history) == 5


def test_program_no_property_and_no_passages_go_straight_to_lm():
    make_toolbox("sscot-d", passages=[])
    program = SemiStructuredCoT(n_samples=1, toolbox="sscot-d")
    pred, lm = run(program, "Who sang for Gabon?",
                   [{"chain": "(Gabon, zzzqqq, #1)"}, {"answer": "someone"}, {"answer": "someone"}])
    (fill,) = pred.trace["fills"]
    assert fill["via"] == "lm"
    assert fill["attempts"][0]["reason"] == "no property" and fill["attempts"][1]["reason"] == "no passages"
    assert len(lm.history) == 3  # parse, recall, answer: no read call without passages


def test_program_unlinked_entity_goes_to_text():
    make_toolbox("sscot-e", passages=["Nowhereland's capital is Utopia City."])
    program = SemiStructuredCoT(n_samples=1, toolbox="sscot-e")
    pred, _ = run(program, "What is the capital of Nowhereland?",
                  [{"chain": "(Nowhereland, capital, #1)"}, {"answer": "Utopia City"}, {"answer": "Utopia City"}])
    (fill,) = pred.trace["fills"]
    assert fill["via"] == "text" and fill["attempts"][0]["reason"] == "no entity"
    assert pred.trace["answers"]["text"] == "Utopia City" and pred.answer == "Utopia City"


def test_program_falls_back_to_recall_without_valid_chain():
    make_toolbox("sscot-f")
    program = SemiStructuredCoT(n_samples=3, toolbox="sscot-f")
    pred, lm = run(program, "What is the capital of Gabon?",
                   [{"chain": "Libreville"}, {"chain": "(Gabon, capital, Libreville)"}, {"chain": "(#2, r, A)"},
                    {"answer": "Libreville"}])
    t = pred.trace
    check_well_formed(t, 3)
    assert len(parse_calls(lm)) == 3 and len(lm.history) == 4
    assert [s["errors"] for s in t["chains"]] == [["malformed"], ["unmasked_triple"],
                                                  ["mask_underflow", "mask_overflow"]]
    assert t["valid_chains"] == [] and t["voted_chain"] is None and t["fills"] == []
    assert t["fallback"] == "recall"
    assert t["answers"] == {"parametric": "Libreville", "text": None, "kg": None, "final": "Libreville"}


def test_program_unfillable_chain_still_answers():
    make_toolbox("sscot-g")
    program = SemiStructuredCoT(n_samples=1, toolbox="sscot-g")
    pred, lm = run(program, "q?", [{"chain": "(#1, r, #2); (#2, s, #1)"}, {"answer": "x"}])
    t = pred.trace
    assert t["fills"] == [] and t["unfilled"] == ["#1", "#2"]
    assert t["filled_chain"] == ["(#1, r, #2)", "(#2, s, #1)"] and pred.answer == "x"


def test_program_state_holds_no_retriever():
    program = SemiStructuredCoT(toolbox="x")
    assert {n for n, _ in program.named_predictors()} == {"parse", "read", "recall", "answer"}
    copy = program.deepcopy()
    assert copy.toolbox == "x" and copy.n_samples == 5 and copy.temperature == 0.7 and copy.k == 5


def test_helpers():
    assert is_unknown("") and is_unknown("unknown") and is_unknown("Unknown.") and is_unknown("N/A")
    assert is_unknown("The passages do not mention it") and is_unknown("I don't know")
    assert not is_unknown("Libreville") and not is_unknown("Notre Dame") and not is_unknown("Nonesuch Records")
    assert hop_question("capital", "Gabon", "tail") == "What is the capital of Gabon?"
    assert hop_question("author", "Dune", "head") == "Who or what has author Dune?"


def test_program_on_real_pack_kg_with_dummy_lm(settings_for):
    """Scripted chain, real linker + relation linker + Oxigraph store: the KG fills the mask."""
    use_toolbox(Toolbox(settings_for()), name="sscot-pack")
    program = SemiStructuredCoT(n_samples=1, toolbox="sscot-pack")
    pred, lm = run(program, "What is the capital of Gabon?",
                   [{"chain": "(Gabon, capital, #1)"}, {"answer": "Libreville"}])
    (fill,) = pred.trace["fills"]
    assert fill["via"] == "kg" and fill["value"] == "Libreville" and fill["ids"] == ["Q3825"]
    assert fill["sparql"] == "SELECT DISTINCT ?x WHERE { wd:Q1000 wdt:P36 ?x . } LIMIT 20"
    assert pred.trace["sparql"][0]["error"] is None
    assert pred.trace["answers"]["kg"] == "Libreville" and len(lm.history) == 2


# ---------------------------------------------------------------------------------------------------------------
# the embedded LM on the real pack
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.real_lm
def test_smoke_real_lm_real_pack(settings_for):
    from hqa.config import load_settings
    from hqa.runtime import configure_dspy

    configure_dspy(load_settings(Path("/nonexistent-hqa.toml"), environ={}))
    use_toolbox(Toolbox(settings_for()), name="sscot-real")
    program = SemiStructuredCoT(n_samples=2, toolbox="sscot-real")
    pred = program(question="What is the capital of Gabon?")
    trace = pred.trace
    check_well_formed(trace, 2)
    assert isinstance(pred.answer, str) and trace["answers"]["final"] == pred.answer
    if trace["valid_chains"]:
        assert trace["voted_chain"] and trace["fallback"] is None
        assert len(trace["fills"]) == len(trace["fill_order"])
    else:
        assert trace["fallback"] == "recall"
