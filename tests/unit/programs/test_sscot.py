"""Semi-Structured CoT, the program: relation linking, then the program driven by DummyLM over a fake toolbox
(SS-CoT §3.1 sampling/filter/vote, Alg. 1, Alg. 2, the parametric step, the ``sources`` orders of Table 3, the
Table 4 exemplars in the prompts, Bamboogle human demos), plus runs on the real pack."""

from __future__ import annotations

from pathlib import Path

import dspy
import pytest
from conftest import ScriptedSparql
from dspy.utils import DummyLM
from sscotkit import check_well_formed, step

from hqa.errors import ConfigError
from hqa.programs import sscot_chain as C
from hqa.programs.sscot import SemiStructuredCoT, decomposition_chain, is_unknown, parse_sources, triplet_text
from hqa.retrievers.base import Evidence
from hqa.retrievers.linking.entities import EntityLinker
from hqa.toolbox import Toolbox
from hqa.retrievers.linking.relations import WELL_KNOWN_PROPERTIES, RelationLinker

GABON = "Gabon >> capital >> #1; #1 >> population >> #2; final answer: #2"
LALA = "LaLa DX >> language >> #1; spirits associated with Shintoism in #1 >> name >> #2; final answer: #2"


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
    assert tb.relations is tb.relations and tb.relations.properties == rl.properties  # built once per toolbox
    injected = RelationLinker(PROPS)
    assert Toolbox(settings, linker=linker, relations=injected).relations is injected


# ---------------------------------------------------------------------------------------------------------------
# the program with DummyLM and a fake toolbox
# ---------------------------------------------------------------------------------------------------------------
class FakeDense:
    def __init__(self, passages: dict[str, list[str]] | list[str]):
        self.passages = passages
        self.queries: list[tuple[str, int]] = []

    def __call__(self, query, k=5):
        self.queries.append((query, k))
        texts = self.passages if isinstance(self.passages, list) else self.passages.get(query, [])
        return [Evidence(text=t, source="text", score=1.0 - i / 10, meta={"id": f"p{i}"})
                for i, t in enumerate(texts[:k])]


class FakeLinker(EntityLinker):
    """A fixed QID for the few names the tests use; property records for the relation linker."""

    FIXED = {"gabon": ("Q1000", "Gabon"), "lala dx": ("Q77", "LaLa DX")}

    def __init__(self):
        super().__init__(PROPS + [{"id": q, "label": lab} for q, lab in self.FIXED.values()])
        self.mentions: list[str] = []

    def link(self, mention, question=None, k=5):
        from hqa.retrievers.linking.entities import Candidate

        self.mentions.append(mention)
        hit = self.FIXED.get(str(mention).strip().lower())
        return [Candidate(hit[0], hit[1], "", 1.0, mention)] if hit else []


WD = "http://www.wikidata.org/entity/"
GABON_KG = {"wd:Q1000 wdt:P36 ?x": [{"x": WD + "Q3825"}], "wd:Q3825 wdt:P1082 ?x": [{"x": "703904"}]}


def make_toolbox(responses=None, labels=None, passages=()):
    from hqa.config import load_settings

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={})
    dense = FakeDense(passages if isinstance(passages, dict) else list(passages))
    tb = Toolbox(settings, linker=FakeLinker(), sparql=ScriptedSparql(responses or {}, labels), dense=dense)
    return tb


def run(program, question, answers):
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = program(question=question)
    return pred, lm


def calls_of(lm, marker):
    return [h for h in lm.history if marker in h["messages"][0]["content"]]


def test_sampling_filter_vote():
    sscot_vote_tb = make_toolbox(responses=GABON_KG, labels={"Q3825": "Libreville"})
    chains = [
        GABON,
        "Gabon >> capital >> #1; final answer: #1",                                        # too few masks
        "gabon >> Capital >> #2; #2 >> population >> #1; final answer: #1",              # same canonical form
        "Gabon >> capital >> #1; #1 >> population of >> the city >> #2; final answer: #2",  # split relation
        "Gabon >> capital city >> #1; #1 >> population >> #2; final answer: #2",
    ]
    program = SemiStructuredCoT(n_samples=5, toolbox=sscot_vote_tb)
    pred, lm = run(program, "How many people live in the capital of Gabon?", [{"reasoning_chain": c} for c in chains])
    t = pred.trace
    check_well_formed(t, 5)
    parses = calls_of(lm, "masked semi-structured reasoning chain")
    assert len(parses) == 5 == len(lm.history)  # KG fills everything, final answer is #2: no other LM call
    assert [h["kwargs"]["rollout_id"] for h in parses] == [0, 1, 2, 3, 4]
    assert all(h["kwargs"]["temperature"] == 0.7 for h in parses)
    assert [s["errors"] for s in t["chains"]] == [[], ["MaskUnderflowError"], [], ["IncorrectTripleFormatError"], []]
    assert t["voted_chain"] == GABON and t["voted_sample"] == 0
    assert [(v["count"], v["first_sample"]) for v in t["votes"]] == [(2, 0), (1, 4)]
    assert step(t, "parse")["errors"] == {"MaskUnderflowError": 1, "IncorrectTripleFormatError": 1}
    assert pred.answer == "703904" and t["answers"]["kg"] == "703904"


def test_mask_bounds_reach_the_filter():
    sscot_bounds_tb = make_toolbox(responses=GABON_KG, labels={"Q3825": "Libreville"})
    one = "Gabon >> capital >> #1; final answer: #1"
    pred, _ = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_bounds_tb, sources="kg", min_masks=1),
                  "What is the capital of Gabon?", [{"reasoning_chain": one}])
    assert pred.trace["chains"][0]["errors"] == [] and pred.answer == "Libreville"
    pred, _ = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_bounds_tb, sources="kg"),
                  "What is the capital of Gabon?", [{"reasoning_chain": one}])
    assert pred.trace["chains"][0]["errors"] == ["MaskUnderflowError"] and pred.answer == ""


def test_algorithm1_fills_repeatedly_as_masks_resolve():
    tb = make_toolbox(responses=GABON_KG, labels={"Q3825": "Libreville"})
    pred, lm = run(SemiStructuredCoT(n_samples=1, toolbox=tb),
                   "How many people live in Gabon's capital?",
                   [{"reasoning_chain": GABON}])
    t = pred.trace
    kg = step(t, "kg")
    assert kg["rounds"] == 2 and kg["tried"] == [0, 1]  # triple 2 became valid only once #1 was filled
    assert kg["filled"] == {"#1": "Libreville", "#2": "703904"}
    assert [(f["mask"], f["via"], f["round"]) for f in t["fills"]] == [("#1", "kg", 1), ("#2", "kg", 2)]
    assert t["fills"][0]["sparql"] == "SELECT DISTINCT ?x WHERE { wd:Q1000 wdt:P36 ?x . } LIMIT 20"
    assert t["attempts"][1]["entities"] == ["Q3825"] and tb.linker.mentions == ["Gabon"]  # the fill's id reused
    assert step(t, "text")["rounds"] == 0 and step(t, "model")["skipped"]
    assert t["filled_chain"] == ("Gabon >> capital >> Libreville; Libreville >> population >> 703904; "
                                 "final answer: 703904")
    assert len(lm.history) == 1 and pred.answer == "703904"


def test_algorithm2_question_per_triple_top_k_and_masks_inside_free_text():
    q1, q2 = "What language is LaLa DX in?", "What are spirits of Shintoism called in Japanese?"
    dense = {q1: ["LaLa DX is a Japanese magazine."], q2: ["In Japanese, the spirits are called kami."]}
    tb = make_toolbox(passages=dense)
    answers = [{"reasoning_chain": LALA}, {"question": q1}, {"answer": "Japanese"}, {"question": q2},
               {"answer": "kami"}]
    pred, lm = run(SemiStructuredCoT(n_samples=1, toolbox=tb, sources="text,model"),
                   "What are the spirits associated with Shintoism called in the language of Lala DX?", answers)
    t = pred.trace
    text = step(t, "text")
    assert text["rounds"] == 2 and text["filled"] == {"#1": "Japanese", "#2": "kami"}
    conv = calls_of(lm, "single-hop question")
    assert '("LaLa DX", "language", ?)' in conv[0]["messages"][-1]["content"]
    # round 2 sees the mask inside the free-text head filled
    assert '("spirits associated with Shintoism in Japanese", "name", ?)' in conv[1]["messages"][-1]["content"]
    assert tb.dense.queries == [(q1, 10), (q2, 10)]  # Appendix E: top 10 per single-hop question
    reads = calls_of(lm, "from the context only")
    assert "kami" in reads[1]["messages"][-1]["content"]
    assert step(t, "model")["skipped"] and len(lm.history) == 5
    assert pred.answer == "kami" and t["answers"]["text"] == "kami"


def test_text_unknown_leaves_the_mask_to_the_model():
    sscot_unknown_tb = make_toolbox(passages=["Gabon is a country in Central Africa."])
    answers = [{"reasoning_chain": GABON}, {"question": "What is the capital of Gabon?"}, {"answer": "unknown"},
               {"filled_reasoning_chain": "Gabon >> capital >> Libreville; Libreville >> population >> 700000; "
                                          "final answer: 700000"}]
    pred, lm = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_unknown_tb, sources="text,model"), "q?",
                   answers)
    t = pred.trace
    assert t["attempts"][0]["reason"] == "unknown" and step(t, "text")["filled"] == {}
    model = step(t, "model")
    assert model["input"] == GABON and model["filled"] == {"#1": "Libreville", "#2": "700000"}
    assert [f["via"] for f in t["fills"]] == ["lm", "lm"]
    assert pred.answer == "700000" and t["answers"]["parametric"] == "700000"


def test_model_fills_the_final_answer_for_hash_answer():
    chain = ("Wessel Dammers >> country of citizenship >> #1; Robert Handcock (rugby union) >> country of "
             "citizenship >> #2; final answer: #answer")
    filled = ("Wessel Dammers >> country of citizenship >> Dutch; Robert Handcock (rugby union) >> country of "
              "citizenship >> New Zealand; final answer: no")
    sscot_answer_tb = make_toolbox()
    pred, lm = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_answer_tb, sources="model"),
                   "same country?",
                   [{"reasoning_chain": chain}, {"filled_reasoning_chain": filled}])
    assert pred.answer == "no" and step(pred.trace, "model")["filled"] == {"#1": "Dutch", "#2": "New Zealand"}
    assert [s["step"] for s in pred.trace["steps"]] == ["parse", "vote", "model", "answer"]


def test_model_step_runs_for_hash_answer_even_when_every_mask_is_filled():
    """§3.2: after all masks are filled the LM may still be needed to reach the final answer (a comparison)."""
    sscot_compare_tb = make_toolbox(responses=GABON_KG, labels={"Q3825": "Libreville"})
    chain = GABON.replace("final answer: #2", "final answer: #answer")
    filled = "Gabon >> capital >> Libreville; Libreville >> population >> 703904; final answer: more than 500000"
    pred, lm = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_compare_tb),
                   "Has Gabon's capital over 500000 people?",
                   [{"reasoning_chain": chain}, {"filled_reasoning_chain": filled}])
    model = step(pred.trace, "model")
    assert model["input"] == ("Gabon >> capital >> Libreville; Libreville >> population >> 703904; "
                              "final answer: #answer")
    assert model["filled"] == {} and len(lm.history) == 2
    assert pred.answer == "more than 500000" == pred.trace["answers"]["parametric"]


def test_model_step_records_masks_in_heads_too():
    chain = "#1 >> position held >> President of the United States; #1 >> start time >> #2; final answer: #1"
    filled = ("James Madison >> position held >> President of the United States; James Madison >> start time >> "
              "1809; final answer: James Madison")
    sscot_heads_tb = make_toolbox()
    pred, _ = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_heads_tb), "q?",
                  [{"reasoning_chain": chain}, {"filled_reasoning_chain": filled}])
    assert step(pred.trace, "kg")["rounds"] == 0  # a masked head is no valid triple (§3.2)
    assert step(pred.trace, "model")["filled"] == {"#1": "James Madison", "#2": "1809"}
    assert pred.answer == "James Madison"


ORDERS = {
    # sources: (steps, who filled #1 and #2, LM calls after the parse)
    "kg,text,model": (["kg", "text", "model"], ["kg", "text"], 2),
    "text,kg,model": (["text", "kg", "model"], ["text", "text"], 4),
    "kg,model": (["kg", "model"], ["kg", "lm"], 1),
    "text,model": (["text", "model"], ["text", "text"], 4),
    "model": (["model"], ["lm", "lm"], 1),
    "kg": (["kg"], ["kg"], 0),
    "text": (["text"], ["text", "text"], 4),
}


@pytest.mark.parametrize("sources", list(ORDERS))
def test_each_order_of_sources_gives_its_own_trace(sources):
    """The KG knows Gabon's capital only; the text knows both hops; the model fills whatever is left."""
    q1, q2 = "What is the capital of Gabon?", "How many people live in Libreville?"
    sscot_order_tb = make_toolbox(responses={"wd:Q1000 wdt:P36 ?x": [{"x": WD + "Q3825"}]},
                 labels={"Q3825": "Libreville"},
                 passages={q1: ["Libreville is the capital of Gabon."], q2: ["Libreville has 703,904 people."]})
    answers = [{"reasoning_chain": GABON}]
    steps, vias, n_calls = ORDERS[sources]
    if sources.startswith("text"):  # the text step meets both hops
        answers += [{"question": q1}, {"answer": "Libreville"}, {"question": q2}, {"answer": "703904"}]
    elif "text" in sources:  # the KG filled #1 already
        answers += [{"question": q2}, {"answer": "703904"}]
    if vias[-1] == "lm":
        answers += [{"filled_reasoning_chain": "Gabon >> capital >> Libreville; Libreville >> population >> 700000; "
                                               "final answer: 700000"}]
    pred, lm = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_order_tb, sources=sources),
                   "q?", answers)
    t = pred.trace
    assert t["sources"] == sources.split(",")
    assert [s["step"] for s in t["steps"]] == ["parse", "vote", *steps, "answer"]
    assert [f["via"] for f in t["fills"]] == vias
    assert len(lm.history) == 1 + n_calls
    for name in steps:  # every step says what it filled
        assert set(step(t, name)["filled"]) == {f["mask"] for f in t["fills"] if f["via"] == {"model": "lm"}.get(
            name, name)}
    expected = {"kg": "", "kg,model": "700000", "model": "700000"}.get(sources, "703904")
    assert pred.answer == expected


def test_sources_validation():
    assert parse_sources("KG, text ,model") == ("kg", "text", "model")
    for bad in ("", "kg,kg", "web", "model,kg", "kg,model,text"):
        with pytest.raises(ConfigError):
            parse_sources(bad)
    with pytest.raises(ConfigError):
        SemiStructuredCoT(min_masks=3, max_masks=2)


def test_prompts_show_the_table4_exemplars():
    sscot_prompts_tb = make_toolbox(passages=["Libreville is the capital of Gabon."])
    answers = [{"reasoning_chain": GABON}, {"question": "What is the capital of Gabon?"}, {"answer": "Libreville"},
               {"question": "How many people live in Libreville?"}, {"answer": "703904"}]
    pred, lm = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_prompts_tb, sources="text,model"), "q?",
                   answers)
    (parse,) = calls_of(lm, "masked semi-structured reasoning chain")
    text = "\n".join(m["content"] for m in parse["messages"])
    for exemplar in ("LaLa DX >> language >> #1; spirits associated with Shintoism in #1 >> name >> #2; "
                     "final answer: #2",
                     "Strut-Harald >> father >> #1; #1 >> place of death >> #2; final answer: #answer",
                     "Were Wessel Dammers and Robert Handcock (Rugby Union) from the same country?"):
        assert exemplar in text
    conv = "\n".join(m["content"] for m in calls_of(lm, "single-hop question")[0]["messages"])
    assert '("basit ali", "place of birth", ?)' in conv and "who performed instincts?" in conv
    read = "\n".join(m["content"] for m in calls_of(lm, "from the context only")[0]["messages"])
    assert "Charles Haughey died of prostate cancer" in read and "unknown" in read

    sscot_prompts_fill_tb = make_toolbox()
    lm2 = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_prompts_fill_tb, sources="model"), "q?",
              [{"reasoning_chain": GABON}, {"filled_reasoning_chain": "x >> r >> y; final answer: y"}])[1]
    fill = "\n".join(m["content"] for m in calls_of(lm2, "Fill every remaining mask")[0]["messages"])
    assert "Strut-Harald >> father >> Gorm the Old; Gorm the Old >> place of death >> Jelling; final answer: Jelling" \
        in fill

    lm3 = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_prompts_fill_tb, sources="model",
                                demos="none"), "q?",
              [{"reasoning_chain": GABON}, {"filled_reasoning_chain": "x >> r >> y; final answer: y"}])[1]
    assert "LaLa DX" not in "\n".join(m["content"] for m in lm3.history[0]["messages"])


def test_fallback_to_recall_without_valid_chain():
    sscot_fallback_tb = make_toolbox()
    pred, lm = run(SemiStructuredCoT(n_samples=2, toolbox=sscot_fallback_tb),
                   "What is the capital of Gabon?",
                   [{"reasoning_chain": "Libreville"}, {"reasoning_chain": "(Gabon, capital, #1)"},
                    {"answer": "Libreville"}])
    t = pred.trace
    check_well_formed(t, 2)
    assert t["valid_chains"] == [] and t["voted_chain"] is None and t["fallback"] == "recall"
    assert t["answers"]["final"] == "Libreville" == pred.answer and len(lm.history) == 3


def test_bamboogle_decompositions_as_chain_demos():
    from hqa.data.datasets import load_bamboogle
    from hqa.optimize.compile import CompileOptions, apply_labeled_human

    records = load_bamboogle()
    masked, filled, subs = decomposition_chain(records[1])
    assert masked == ("What was the first spacecraft that ever approached Uranus? >> answer >> #1; "
                      "What rocket was #1 launched on? >> answer >> #2; final answer: #2")
    assert filled.endswith("final answer: titan iiie-centaur") and subs[1] == "What rocket was Voyager 2 launched on?"
    assert decomposition_chain(records[0]) is None  # Citibank: the second sub-question does not name 1812
    chains = [decomposition_chain(r) for r in records]
    assert sum(c is not None for c in chains) >= 100
    assert all(C.validate(c[0]) == [] for c in chains if c)

    program = SemiStructuredCoT()
    assert set(program.human_demo_builders()) == {"parse", "to_question", "fill", "recall"}
    held_out = [r.question for r in records[:60]]
    compiled = apply_labeled_human(program, CompileOptions(program="sscot", optimizer="labeled-human", k=4),
                                   held_out)
    demos = {n: p.demos for n, p in compiled.named_predictors()}
    assert [len(demos[n]) for n in ("parse", "to_question", "fill", "recall")] == [4, 4, 4, 4]
    assert all(C.validate(d.reasoning_chain) == [] for d in demos["parse"])
    assert not {d.question for d in demos["parse"] + demos["fill"] + demos["recall"]} & set(held_out)
    assert {d.answer for d in demos["recall"]} <= {a for r in records for a in r.answers}
    assert len(demos["read"]) == 3  # Table 4's reading exemplars stay
    assert len(program.parse.demos) == 6  # the program itself is untouched
    # --exclude bamboogle: no Bamboogle question becomes a demo, whatever the dev set
    fenced = apply_labeled_human(program, CompileOptions(program="sscot", optimizer="labeled-human", k=4,
                                                         exclude=("bamboogle",)), [])
    assert [len(p.demos) for n, p in fenced.named_predictors() if n != "read"] == [0, 0, 0, 0]


@pytest.mark.parametrize("optimizer", ["labeled-human", "human+bootstrap", "bootstrap", "dpp-human",
                                       "relevance-human", "diversity-human", "random-human"])
def test_every_demo_optimizer_accepts_sscot_on_bamboogle(optimizer):
    """Bamboogle has no HumanIQ library, and SS-CoT needs none: its chain demos are its own library."""
    from hqa.optimize.compile import CompileOptions

    CompileOptions(program="sscot", optimizer=optimizer, dev="bamboogle").validate()
    with pytest.raises(ConfigError, match="no HumanIQ library"):
        CompileOptions(program="hqa", optimizer=optimizer if "human" in optimizer else "labeled-human",
                       dev="bamboogle").validate()


def test_dpp_selects_chain_demos_per_question_for_every_sscot_predictor(tmp_path):
    """``hqa compile --program sscot --optimizer dpp-human --dev bamboogle``: each question's parse / fill /
    question-conversion / recall prompts hold the k chain demos selected for it, never an evaluation question."""
    from hqa.data.datasets import load_bamboogle
    from hqa.optimize.compile import CompileOptions, compile_program
    from hqa.artifacts.dpp_program import DPPProgram

    records = load_bamboogle()
    dev = [r.to_example() for r in records[:40]]
    opts = CompileOptions(program="sscot", optimizer="dpp-human", dev="bamboogle", k=3,
                          program_kwargs={"n_samples": 1, "sources": "model"})
    toolbox = make_toolbox()
    program, info = compile_program(opts, [], dev, toolbox=toolbox)
    assert info["wrapper"] == "dpp" and isinstance(program, DPPProgram)
    dev_questions = {ex.question for ex in dev}
    assert len(program.library) == sum(decomposition_chain(r) is not None for r in records[40:])
    assert not {d.question for d in program.library} & dev_questions  # no evaluation question can be selected

    question = dev[1].question
    pred, lm = run(program, question, [{"reasoning_chain": GABON},
                                       {"filled_reasoning_chain": "a >> b >> c; d >> e >> f; final answer: f"}])
    chosen = {d.id: d for d in program.library if d.id in pred.selected_demos}
    assert len(chosen) == 3 and pred.trace["demos"] == pred.selected_demos
    parse_call = calls_of(lm, "masked semi-structured reasoning chain")[0]
    parse_prompt = "\n".join(m["content"] for m in parse_call["messages"])
    fill_prompt = "\n".join(m["content"] for m in calls_of(lm, "Fill every remaining mask")[0]["messages"])
    for demo in chosen.values():
        masked, filled, _ = decomposition_chain(next(r for r in records if r.id == demo.id))
        assert masked in parse_prompt and filled in fill_prompt
    assert "LaLa DX" not in parse_prompt  # the selected demos replace Table 4's
    own = decomposition_chain(records[1])[0]
    assert own not in parse_prompt and own not in fill_prompt  # never the question's own chain
    # the same selection after save / load
    fresh = DPPProgram(SemiStructuredCoT(n_samples=1, sources="model", toolbox=toolbox))
    fresh.load_state(program.dump_state())
    assert [d.id for d in fresh.select(question, "chain")] == [d.id for d in program.select(question, "chain")]


def test_program_state_holds_no_retriever(settings_for):
    toolbox = Toolbox(settings_for())  # copies share it, the state never holds it
    program = SemiStructuredCoT(toolbox=toolbox, sources="text,model")
    assert {n for n, _ in program.named_predictors()} == {"parse", "to_question", "read", "fill", "recall"}
    copy = program.deepcopy()
    assert copy.toolbox is toolbox and copy.sources == "text,model" and copy.k == 10
    assert (copy.n_samples, copy.temperature, copy.min_masks, copy.max_masks) == (5, 0.7, 2, 4)


def test_helpers():
    assert is_unknown("") and is_unknown("unknown") and is_unknown("Unknown.") and is_unknown("N/A")
    assert not is_unknown("Libreville") and not is_unknown("Nonesuch Records")
    assert triplet_text("basit ali", "place of birth") == '("basit ali", "place of birth", ?)'


def test_program_on_real_pack_kg_with_dummy_lm(settings_for):
    """Scripted chain, real linker + relation linker + Oxigraph store: Alg. 1 fills the first mask."""
    sscot_pack_tb = Toolbox(settings_for())
    program = SemiStructuredCoT(n_samples=1, toolbox=sscot_pack_tb, sources="kg")
    pred, lm = run(program, "What is the capital of Gabon?",
                   [{"reasoning_chain": "Gabon >> capital >> #1; #1 >> country >> #2; final answer: #1"}])
    fill = pred.trace["fills"][0]
    assert fill["via"] == "kg" and fill["value"] == "Libreville" and fill["ids"] == ["Q3825"]
    assert fill["sparql"] == "SELECT DISTINCT ?x WHERE { wd:Q1000 wdt:P36 ?x . } LIMIT 20"
    assert pred.trace["sparql"][0]["error"] is None
    assert pred.answer == "Libreville" and len(lm.history) == 1


# ---------------------------------------------------------------------------------------------------------------
# the embedded LM on the real pack
# ---------------------------------------------------------------------------------------------------------------
def test_grammar_option_sends_the_chain_language_as_a_json_schema_pattern():
    """``grammar=True``: DSPy's JSONAdapter asks for a schema whose chain field carries CHAIN_PATTERN, which
    llama.cpp compiles into a grammar; the pattern admits the paper's chains and refuses other shapes."""
    import json
    import re

    from dspy.adapters.json_adapter import _get_structured_outputs_response_format
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    program = SemiStructuredCoT(grammar=True)
    schema = _get_structured_outputs_response_format(program.parse.signature).model_json_schema()
    assert schema["properties"]["reasoning_chain"]["pattern"] == C.CHAIN_PATTERN
    LlamaGrammar.from_string(json_schema_to_gbnf(json.dumps(schema)), verbose=False)
    plain = _get_structured_outputs_response_format(SemiStructuredCoT().parse.signature).model_json_schema()
    assert "pattern" not in plain["properties"]["reasoning_chain"]  # the paper's setting: unconstrained

    body = C.CHAIN_PATTERN.strip("^$")
    for chain in (GABON, LALA, GABON.replace("#2; final answer: #2", "#2; final answer: #answer")):
        assert re.fullmatch(body, chain)
    for bad in ("Gabon >> capital >> #1", "(Gabon, capital, #1); final answer: #1",
                "Gabon >> capital >> #; final answer: #1", "Gabon >> capital >> #1; final answer: Libreville"):
        assert not re.fullmatch(body, bad)
    assert not re.fullmatch(body, "2017 >> r >> #1; final answer: #1")  # would be read as JSON by DSPy
    # a bracket or brace anywhere: DSPy's json_repair would pull ['Gabon'] out of the reply, which then fails to parse
    for bad in ("Gabon [country] >> capital >> #1; final answer: #1", "Gabon >> capital {x} >> #1; final answer: #1"):
        assert not re.fullmatch(body, bad)
    assert not re.fullmatch(body, "A" * 41 + " >> r >> #1; final answer: #1")  # slots are bounded
    with dspy.context(lm=DummyLM([{"reasoning_chain": LALA}]), adapter=dspy.ChatAdapter()):
        out = program.parse(question="q?")
    assert out.reasoning_chain == LALA and C.validate(out.reasoning_chain) == []

    # a reply DSPy decodes as JSON is refused, not turned into a made-up chain
    from dspy.adapters.utils import parse_value

    from hqa.signatures.sscot import ChainText

    assert parse_value(LALA, ChainText) == LALA
    with pytest.raises(ValueError):
        parse_value("[2017, 'x'] >> r", ChainText)

    # the sampled parse calls get room for the longest chain the pattern admits
    sscot_grammar_tb = make_toolbox()
    for grammar, expected in ((True, 640), (False, None)):
        _, lm = run(SemiStructuredCoT(n_samples=1, toolbox=sscot_grammar_tb, sources="kg",
                                      grammar=grammar), "q?",
                    [{"reasoning_chain": LALA}])
        assert lm.history[0]["kwargs"].get("max_tokens") == expected


def test_dense_model_option_retrieves_with_the_named_model(monkeypatch):
    """Appendix E's Contriever: ``dense_model`` swaps the text step's retriever (top 10 per single-hop question);
    a model not in the local cache is one clear error at construction."""
    from hqa.retrievers.embedding import encoders as embed

    used: list[tuple] = []

    def fake_index(corpus, kind, model):
        used.append((corpus, kind, model))
        return FakeDense({"What is the capital of Gabon?": ["Libreville is the capital of Gabon."]})

    monkeypatch.setattr(embed, "in_hub_cache", lambda name: True)
    tb = make_toolbox()
    monkeypatch.setattr(tb, "doc_index", fake_index)
    program = SemiStructuredCoT(n_samples=1, toolbox=tb, sources="text", dense_model="contriever")
    pred, _ = run(program, "q?", [{"reasoning_chain": "Gabon >> capital >> #1; #1 >> mayor >> #2; final answer: #2"},
                                  {"question": "What is the capital of Gabon?"}, {"answer": "Libreville"},
                                  {"question": "Who is the mayor of Libreville?"}, {"answer": "unknown"}])
    assert used == [("text", "dense", embed.CONTRIEVER)] * 2 and tb.dense.queries == []
    assert step(pred.trace, "text")["filled"] == {"#1": "Libreville"}
    monkeypatch.setattr(embed, "in_hub_cache", lambda name: False)
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache"):
        SemiStructuredCoT(dense_model="contriever")


@pytest.mark.parametrize("optimizer", ["bootstrap", "human+bootstrap"])
def test_bootstrap_puts_successful_traces_on_the_sscot_predictors_that_ran(optimizer):
    """``hqa compile --program sscot --optimizer bootstrap`` (and with the chain demos as teacher): the parse and fill
    calls of questions answered right become those predictors' demos."""
    from hqa.data.datasets import load_bamboogle
    from hqa.optimize.compile import CompileOptions, compile_program

    records = load_bamboogle()
    train = [r.to_example() for r in records[1:3]]
    chain = "A >> answer >> #1; #1 >> answer >> #2; final answer: #2"
    answers = []
    for ex in train:
        gold = ex.answers[0]
        answers += [{"reasoning_chain": chain},
                    {"filled_reasoning_chain": f"A >> answer >> B; B >> answer >> {gold}; final answer: {gold}"}]
    opts = CompileOptions(program="sscot", optimizer=optimizer, dev="bamboogle", max_labeled_demos=0,
                          program_kwargs={"n_samples": 1, "sources": "model"})
    with dspy.context(lm=DummyLM(answers * 2), adapter=dspy.ChatAdapter()):
        program, _ = compile_program(opts, train, [r.to_example() for r in records[3:10]])
    demos = {n: p.demos for n, p in program.named_predictors()}
    assert [d.reasoning_chain for d in demos["parse"]] == [chain, chain]
    assert [d.filled_reasoning_chain.rsplit(": ", 1)[1] for d in demos["fill"]] == [ex.answers[0] for ex in train]
    assert all(d.get("augmented") for d in demos["parse"] + demos["fill"])
