"""SS-CoT's chain language (§3.1, Table 4), the Appendix-B filter, canonical forms, voting and the §3.2 fill state."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from hqa.programs import sscot_chain as C

TABLE4 = json.loads(resources.files("hqa.data").joinpath("sscot", "table4_exemplars.json").read_text("utf-8"))
MASKED = [r["reasoning_chain"] for r in TABLE4["parse"]]
FILLED = [r["filled_reasoning_chain"] for r in TABLE4["fill"]]


def test_exemplar_file_cites_its_source_and_holds_table4():
    assert "Table 4" in TABLE4["source"] and "Semi-Structured Chain-of-Thought" in TABLE4["source"]
    assert [len(TABLE4[k]) for k in ("parse", "to_question", "read", "fill")] == [6, 3, 3, 3]


@pytest.mark.parametrize("text", MASKED + FILLED)
def test_every_table4_chain_round_trips(text):
    chain = C.parse_chain(text)
    assert str(chain) == text
    assert C.parse_chain(str(chain)) == chain
    rebuilt = C.Chain(tuple(C.Triple(*t.slots) for t in chain.triples), chain.final)
    assert str(rebuilt) == text


@pytest.mark.parametrize("text", MASKED)
def test_every_table4_parse_exemplar_passes_the_filter(text):
    assert C.validate(text) == []


def test_parse_details():
    c = C.parse_chain(MASKED[0])
    assert c.triples[1] == C.Triple("spirits associated with Shintoism in #1", "name", "#2")
    assert c.final == "#2"
    assert C.parse_chain("Reasoning Chain: " + MASKED[4]) == C.parse_chain(MASKED[4])
    assert C.parse_chain('"' + MASKED[4] + '"') == C.parse_chain(MASKED[4])
    quoted = 'quote "a; b" >> author >> #1; #1 >> born >> #2; final answer: #2'
    assert C.parse_chain(quoted).triples[0].head == 'quote "a; b"'
    assert C.mask_numbers("flag made first between Cuba and #1") == [1]
    assert C.mask_numbers("C# and F# minor, #2 and #10") == [2, 10]
    assert not C.has_mask("C# designer") and C.has_bare_mask("# 3") and C.has_bare_mask("#x")
    for bad in ("", "   ", "A >> r >> #1", "A >> r >> #1; final answer", "A >> r; final answer: #1",
                "final answer: #1", "A >> r >> >> #1; final answer: #1"):
        with pytest.raises(C.ChainSyntaxError):
            C.parse_chain(bad)
        assert C.try_parse(bad) is None


# -- Appendix B: each error type, triggered alone --------------------------------------------------------------------
ONE_ERROR = {
    "MaskUnderflowError": "Gabon >> capital >> #1; final answer: #1",
    "MaskOverflowError": "A >> r >> #1; #1 >> r >> #2; #2 >> r >> #3; #3 >> r >> #4; #4 >> r >> #5; "
                         "final answer: #5",
    "DiscontinuousMaskError": "A >> r >> #1; #1 >> r >> #3; final answer: #3",
    "MissingMaskNumberError": "A >> r >> #1; #1 >> r >> #2; #2 >> s >> #; final answer: #answer",
    "MissingTripleMaskError": "A >> r >> #1; #1 >> r >> #2; B >> s >> C; final answer: #2",
    "IncorrectTripleRelationMaskError": "A >> r >> #1; B >> #1 >> #2; final answer: #2",
    "IncorrectTripleFormatError": "A >> r >> #1; #1 >> place >> of birth >> #2; final answer: #2",
    "FinalAnswerFormatError": "A >> r >> #1; #1 >> r >> #2",
}


def test_the_seven_appendix_b_types_by_name():
    assert set(C.ERROR_TYPES) == set(ONE_ERROR)
    assert len(C.ERROR_TYPES) == 8  # MaskUnderflow/MaskOverflow are one item of Appendix B's seven


@pytest.mark.parametrize("error", list(ONE_ERROR))
def test_each_error_type_alone(error):
    assert C.validate(ONE_ERROR[error]) == [error]


@pytest.mark.parametrize("chain", [
    "A >> r >> #1; #1 >> r >> #2",                              # no final clause
    "A >> r >> #1; #1 >> r >> #2; final answer: Paris",         # final answer not a mask
    "A >> r >> #1; #1 >> r >> #2; final answer: #3",            # a mask the triples never use
    "A >> r >> #1; final answer: #1; #1 >> r >> #2; final answer: #2",  # a final clause before the end
    "A >> r >> #1; #1 >> r >> #2; answer: #2",
])
def test_final_answer_format(chain):
    assert C.validate(chain) == ["FinalAnswerFormatError"]


def test_mask_bounds_are_parameters():
    assert C.validate(ONE_ERROR["MaskUnderflowError"], min_masks=1) == []
    assert C.validate(ONE_ERROR["MaskOverflowError"], max_masks=5) == []
    assert C.validate(MASKED[0], min_masks=3) == ["MaskUnderflowError"]
    assert C.validate(MASKED[0], max_masks=1) == ["MaskOverflowError"]
    assert (C.MIN_MASKS, C.MAX_MASKS) == (2, 4)


def test_several_errors_and_no_chain():
    assert C.validate("A >> #1 >> B; final answer: #9") == [
        "MaskUnderflowError", "MissingTripleMaskError", "IncorrectTripleRelationMaskError", "FinalAnswerFormatError"]
    assert C.validate("") == ["MaskUnderflowError", "IncorrectTripleFormatError", "FinalAnswerFormatError"]
    assert C.validate(None) == ["MaskUnderflowError", "IncorrectTripleFormatError", "FinalAnswerFormatError"]
    assert C.validate("Libreville") == ["MaskUnderflowError", "IncorrectTripleFormatError", "FinalAnswerFormatError"]


# -- canonical forms and voting --------------------------------------------------------------------------------------
def test_canonical_and_vote():
    a = "Gabon >> capital >> #1; #1 >> population >> #2; final answer: #2"
    b = "gabon  >>  Capital >> #2; #2 >> population >> #1; final answer: #1"
    assert C.canonical(a) == C.canonical(b) == "gabon >> capital >> #1; #1 >> population >> #2; final answer: #2"
    assert C.canonical("nonsense") is None
    v = C.vote(["x", MASKED[4], a, b, MASKED[4]])
    assert (v.winner, [n for _, n, _ in v.counts]) == (1, [2, 2])  # tie between two forms → the earliest
    assert C.vote(["x", ""]) is None


# -- the fill state of §3.2 ------------------------------------------------------------------------------------------
def test_valid_triples_follow_the_fill_state():
    chain = C.parse_chain(MASKED[0])  # LaLa DX >> language >> #1; spirits ... in #1 >> name >> #2
    assert C.valid_triples(chain, {}) == [0]
    assert C.valid_triples(chain, {1: "Japanese"}) == [1]  # the mask inside the free-text head is now known
    assert C.valid_triples(chain, {1: "Japanese", 2: "kami"}) == []
    both = C.parse_chain(MASKED[3])  # two independent heads
    assert C.valid_triples(both, {}) == [0, 1]
    head_masked = C.parse_chain("#1 >> position held >> President; #1 >> start time >> #2; final answer: #2")
    assert C.valid_triples(head_masked, {}) == []  # a masked head is never valid (only the tail may be unknown)
    filled = C.substitute(chain, {1: "Japanese", 2: "kami"})
    assert str(filled) == ("LaLa DX >> language >> Japanese; spirits associated with Shintoism in Japanese >> name "
                           ">> kami; final answer: kami")
    assert C.open_masks(chain, {1: "Japanese"}) == [2]
