"""Selective answering (hqa.answering.selective): answer types, type fit, the calibrated threshold, abstention output
(hqa.answering.presentation), risk-coverage (hqa.reports.selective) and the programs.abstain modes."""

import json
from importlib import resources

import dspy
import pytest
from dspy.utils import DummyLM
from prockit import _abstaining

from hqa.answering import presentation, selective
from hqa.answering.candidates import AnswerCandidate, rank_candidates
from hqa.reports import selective as selective_report
from hqa.retrievers.base import Evidence


@pytest.mark.parametrize("question, kind", [
    ("Who directed Pulp Fiction?", "person"),
    ("Whom did Marie Curie marry?", "person"),
    ("Which actor played Forrest Gump?", "person"),
    ("Where was Megan Rapinoe born?", "place"),
    ("In which city was Alan Turing born?", "place"),
    ("What is the capital of Gabon?", "place"),
    ("Which football club did Pele play for?", "organisation"),
    ("What band recorded Abbey Road?", "organisation"),
    ("Which film won the Oscar in 1998?", "work"),
    ("What was the first novel of Jane Austen?", "work"),
    ("When did World War II end?", "date"),
    ("In what year was the Eiffel Tower built?", "date"),
    ("How many children did Johann Sebastian Bach have?", "number"),
    ("What is the population of Paris?", "number"),
    ("What genre is Breaking Bad?", "other"),
])
def test_expected_type_of_question_forms(question, kind):
    assert selective.expected_type(question) == kind


def _cand(text, relations=(), qids=(), score=5.0, source="triples"):
    return AnswerCandidate(text, score, "support", source, {"kg_rel": 1.0}, list(qids), list(relations))


MODEL = {"features": list(selective.FEATURES), "weights": [1.0] + [0.0] * (len(selective.FEATURES) - 1),
         "bias": 10.0, "mean": [0.0] * len(selective.FEATURES), "std": [1.0] * len(selective.FEATURES),
         "threshold": 0.5}  # confident about everything: only the type can make it abstain


def test_type_mismatched_top_candidate_abstains():
    place = _cand("Knoxville", relations=[("P19", "object")])  # the object of "place of birth"
    person = _cand("Quentin Tarantino", relations=[("P57", "object")])  # the object of "director"
    d = selective.decide("Who directed Pulp Fiction?", [place, person], model=MODEL)
    assert d.abstained and d.fit == -1 and "person" in d.reason and "place" in d.reason
    d = selective.decide("Who directed Pulp Fiction?", [person, place], model=MODEL)
    assert not d.abstained and d.fit == 1
    # a date for a "where" question, a name for a "when" question
    assert selective.decide("Where was Megan Rapinoe born?", [_cand("5 July 1985")], model=MODEL).abstained
    assert selective.decide("When did World War II end?", [_cand("Berlin")], model=MODEL).abstained
    # unknown type: no mismatch, the confidence decides
    assert not selective.decide("Who directed Pulp Fiction?", [_cand("Somebody")], model=MODEL).abstained


def test_kg_types_come_from_the_worlds_classes(settings_for):
    """P31 classes of the candidate's QID, asked of the pack's KG (Q3624078 sovereign state: a place)."""
    from hqa.toolbox import Toolbox

    tb = Toolbox(settings_for())
    types = selective.kg_types(["Q1000", "Q104123", "Q228624"], tb.sparql)
    assert types["Q228624"] == {"person"}  # only its class says so: wdt:P31 wd:Q5 (human)
    assert "place" in types["Q1000"]  # Gabon: wdt:P31 wd:Q3624078 in the pack
    assert "work" in types["Q104123"]  # Pulp Fiction: a film / has a director
    assert selective.kg_types(["Q1000"], None) == {"Q1000": set()}


def test_candidates_carry_their_kg_ids_and_relations():
    ev = Evidence(text="Pulp Fiction director Quentin Tarantino", source="triples",
                  meta={"s": "<http://www.wikidata.org/entity/Q104123>",
                        "p": "<http://www.wikidata.org/prop/direct/P57>", "o": "<http://www.wikidata.org/entity/Q3772>", "s_label": "Pulp Fiction",
                        "p_label": "director", "o_label": "Quentin Tarantino"})
    cands = {c.text: c for c in rank_candidates("Who directed it?", [ev])}
    assert cands["Quentin Tarantino"].qids == ["Q3772"] and cands["Quentin Tarantino"].relations == [("P57", "object")]
    assert cands["Pulp Fiction"].relations == [("P57", "subject")]


def _data_model(threshold):
    shipped = json.loads(resources.files("hqa.data").joinpath("abstain.json").read_text(encoding="utf-8"))
    return {**shipped, "threshold": threshold}


def test_threshold_read_from_the_data_file(monkeypatch):
    shipped = json.loads(resources.files("hqa.data").joinpath("abstain.json").read_text(encoding="utf-8"))
    selective.calibration.cache_clear()
    assert selective.calibration() == shipped and 0.0 < shipped["threshold"] < 1.0
    assert "compmix/train" in shipped["fitted_on"]
    cands = [_cand("Quentin Tarantino", relations=[("P57", "object")])]
    conf = selective.confidence(selective.confidence_features(cands, 1), shipped)
    for threshold, abstains in ((conf + 1e-6, True), (conf - 1e-6, False)):
        text = json.dumps({**shipped, "threshold": threshold})

        class Files:
            def joinpath(self, name):
                assert name == "abstain.json"
                return type("F", (), {"read_text": lambda self, encoding=None: text})()

        monkeypatch.setattr(selective.resources, "files", lambda pkg: Files())
        selective.calibration.cache_clear()
        try:
            assert selective.decide("Who directed Pulp Fiction?", cands).abstained is abstains
        finally:
            monkeypatch.undo()
            selective.calibration.cache_clear()


def test_abstention_json_and_text():
    pred = dspy.Prediction(answer="", abstained=True, reason="confidence 0.10 is below the calibrated threshold",
                           confidence=0.1, candidates=[{"text": "Knoxville", "score": 1.5, "source": "triples",
                                                        "support": "Quentin Tarantino place of birth"}])
    fields = presentation.prediction_fields(pred)
    assert fields["answer"] is None and fields["abstained"] is True and "threshold" in fields["reason"]
    assert fields["candidates"][0]["text"] == "Knoxville"
    text = "\n".join(presentation.abstention_lines(pred, "the knowledge pack"))
    assert text.startswith("No answer found in the knowledge pack") and "Knoxville" in text
    assert "Quentin Tarantino place of birth" in text
    answered = dspy.Prediction(answer="Quentin Tarantino", abstained=False, confidence=0.9, candidates=[])
    assert presentation.prediction_fields(answered) == {"answer": "Quentin Tarantino", "abstained": False,
                                                     "reason": None, "confidence": 0.9, "candidates": [],
                                                     "fallback": None}
    assert presentation.abstention_lines(answered, "x") is None
    # one shape for every program: a program without selective answering has no confidence; its candidates (here
    # HumanIQ's final response generation's) are listed; an empty answer is no answer
    merged = dspy.Prediction(answer="x", trace={"program": "humaniq", "merge_candidates": ["x", "y"]})
    assert presentation.prediction_fields(merged) == {"answer": "x", "abstained": False, "reason": None,
                                                   "confidence": None, "candidates": [{"text": "x"}, {"text": "y"}],
                                                   "fallback": None}
    empty = presentation.prediction_fields(dspy.Prediction(answer="  ", trace={}))
    assert empty == {"answer": None, "abstained": True, "reason": "the program gave no answer", "confidence": None,
                     "candidates": [], "fallback": None}
    assert list(presentation.prediction_fields(pred)) == list(presentation.ANSWER_KEYS)


def test_cli_ask_prints_no_answer_found(monkeypatch, capsys, settings_for):
    import hqa.app
    from hqa.cli import args as cli_args, entry as cli

    pred = dspy.Prediction(answer="", abstained=True, reason="no candidate answer in the evidence",
                           confidence=None, candidates=[{"text": "Gabon", "score": 0.5, "source": "text",
                                                         "support": "Gabon is a country."}], trace={})

    class Opened:
        warnings = []
        program = staticmethod(lambda question: pred)

    monkeypatch.setattr(hqa.app, "open_program", lambda *a, **k: Opened())
    monkeypatch.setattr(hqa.app, "prefetch", lambda opened: type("W", (), {"join": lambda self: None})())
    monkeypatch.setattr(cli_args, "settings", lambda args: settings_for())
    assert cli.main(["ask", "--json", "What is it?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["answer"] is None and out["abstained"] is True and out["candidates"][0]["text"] == "Gabon"
    assert cli.main(["ask", "What is it?"]) == 0
    text = capsys.readouterr().out
    assert "No answer found in the knowledge pack" in text and "Gabon is a country." in text
    assert "A: " not in text


def _row(conf, right, fit=1):
    sel = {"confidence": conf, "best": "yes" if right else "no", "type_fit": fit, "abstained": conf is None}
    return {"answer": "", "gold": ["yes"], "scores": {"recall": 0.0}, "trace": {"selective": sel}}


def test_risk_coverage_on_a_hand_made_set():
    rows = [_row(0.9, True), _row(0.8, True), _row(0.7, False), _row(0.7, True), _row(0.2, False),
            _row(None, False), _row(0.95, False, fit=-1)]  # no candidate; a type mismatch is never answered
    curve = selective_report.risk_coverage(rows)
    assert [p["threshold"] for p in curve] == [0.9, 0.8, 0.7, 0.2]
    assert [round(p["coverage"], 4) for p in curve] == [round(x / 7, 4) for x in (1, 2, 4, 5)]
    assert [p["precision"] for p in curve] == [1.0, 1.0, 0.75, 0.6]
    assert curve[2]["risk"] == 0.25
    # at the threshold the program used: answered rows carry their answer and score
    rows[0].update(answer="yes", scores={"recall": 1.0}), rows[0]["trace"]["selective"].update(abstained=False)
    rows[2].update(answer="no"), rows[2]["trace"]["selective"].update(abstained=False)
    s = selective_report.selective_summary(rows)
    assert (s["answered"], s["coverage"], s["precision"], s["accuracy"]) == (2, 2 / 7, 0.5, 1 / 7)
    assert "## Selective answering" in selective_report.selective_markdown(s)
    from hqa.reports.summary import render_markdown, summarize_rows

    for r in rows:
        r.update(id="q", question="?")
    summary = summarize_rows(rows)
    assert summary["selective"]["answered"] == 2 and "## Selective answering" in render_markdown(summary)
    assert selective_report.selective_summary([{"answer": "x", "scores": {}, "trace": {}}]) is None


@pytest.mark.parametrize("mode, provider, abstains", [
    ("on", "local", True), ("off", "local", False), ("auto", "local", True), ("auto", "openai", False),
    ("on", "openai", True),
])
def test_abstain_modes(settings_for, monkeypatch, mode, provider, abstains):
    """With a threshold no answer reaches, ``on`` abstains and ``off`` answers; ``auto`` abstains with the
    embedded LM only.  Config or the program's own option selects the mode."""
    from hqa.programs.simple import SimpleHybrid
    from hqa.toolbox import Toolbox
    from tests.conftest import KeepOrderReranker, fake_bm25, fake_dense

    monkeypatch.setattr(selective, "calibration", lambda: _data_model(1.01))
    extra = {"lm_model": "gpt-x"} if provider != "local" else {}
    settings = settings_for(programs_answer_mode="grounded", programs_abstain=mode, lm_provider=provider, **extra)
    toolbox = Toolbox(settings, dense=fake_dense, bm25=fake_bm25, reranker=KeepOrderReranker())
    lm = DummyLM([{"answer": "unused"}] * 3)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox, memory="fallback")(question="What is the capital of Gabon?")
        assert len(lm.history) == 0  # grounded, one choice, no memory: no LM call either way
        assert pred.abstained is abstains
        if abstains:
            assert pred.answer == "" and "threshold" in pred.reason and pred.candidates
            assert pred.trace["selective"]["abstained"] and pred.trace["answers"]["final"] == ""
        else:
            assert pred.answer and pred.reason is None
        # the program's own option wins over the config
        other = SimpleHybrid(toolbox=toolbox, memory="fallback", abstain="off" if abstains else "on")
        assert other(question="What is the capital of Gabon?").abstained is (not abstains)


def test_bad_abstain_values_are_refused(settings_for):
    from hqa.errors import ConfigError
    from hqa.programs.simple import SimpleHybrid

    with pytest.raises(ValueError, match="abstain must be one of"):
        SimpleHybrid(abstain="maybe")
    with pytest.raises(ConfigError, match="programs.abstain"):
        settings_for(programs_abstain="sometimes")


def test_no_candidate_is_an_abstention_without_an_lm_call():
    """With nothing in the evidence to answer from, selective answering abstains instead of asking the LM for its
    closed-book answer (memory="fallback")."""
    from hqa.config import load_settings
    from hqa.programs.simple import SimpleHybrid
    from hqa.toolbox import Toolbox
    from tests.conftest import KeepOrderReranker

    abstain_empty_tb = Toolbox(load_settings(environ={}), dense=lambda q, k=5: [], bm25=lambda q, k=5: [],
                        reranker=KeepOrderReranker())
    lm = DummyLM([{"answer": "Zyx"}] * 2)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=abstain_empty_tb, memory="fallback", abstain="on")(question="Qwv?")
    assert pred.abstained and pred.answer == "" and lm.history == [] and "no candidate" in pred.reason


def test_serve_json_gives_a_null_answer_on_abstention():
    from fastapi.testclient import TestClient

    from hqa.app import OpenedProgram
    from hqa.serve import create_app

    app = create_app(OpenedProgram(_abstaining, label="abst", kind="abst", source="program"))
    with TestClient(app) as client:
        r = client.post("/v1/ask", json={"question": "Who directed it?"})
    body = r.json()
    assert r.status_code == 200 and body["answer"] is None and body["abstained"] is True
    assert "threshold" in body["reason"] and body["candidates"][0]["text"] == "Knoxville"


def test_evaluation_and_batch_rows_record_the_abstention():
    from hqa.jobs.evaluate import run_one
    from hqa.schemas.records import check_row

    row = run_one(_abstaining, dspy.Example(id="q1", question="Who directed it?", answers=["Knoxville"],
                                            answer_ids=[]).with_inputs("question"))
    assert row["abstained"] is True and "threshold" in row["reason"] and row["candidates"][0]["text"] == "Knoxville"
    assert row["answer"] is None and row["scores"]["recall"] == 0.0  # an abstention is never a correct answer
    assert row["confidence"] == 0.1
    assert check_row(json.loads(json.dumps(row)), "row") is not None  # and it survives a resume


def _linker(*entities):
    from hqa.retrievers.linking.entities import EntityLinker

    return EntityLinker([{"id": q, "label": label, "description": desc} for q, label, desc in entities],
                        similarity=lambda question, texts: [0.0] * len(texts))


@pytest.mark.parametrize("description,kind", [
    ("1968 film by Stanley Kubrick", "work"), ("capital of France", "place"), ("American rock band", "organisation"),
    ("American singer and actress", "person"), ("American film director", "person"), ("planet", None),
    ("head of state", None)])
def test_description_type_is_the_head_noun_before_the_first_preposition(description, kind):
    assert selective.description_type(description) == kind


def test_a_candidate_the_kg_does_not_type_is_typed_by_its_short_description():
    """A passage candidate (no QID, no relation): its label's entity in the linker (the pack's entities, with the
    Wikipedia leads' short descriptions) gives its kind; a KG-typed candidate keeps its KG kind."""
    linker = _linker(("Q103474", "2001: A Space Odyssey", "1968 film by Stanley Kubrick"),
                     ("Q2001", "Stanley Kubrick", "American film director"))
    film, kubrick = _cand("2001: A Space Odyssey", source="text"), _cand("Stanley Kubrick", source="text")
    q = "Who directed 2001: A Space Odyssey?"
    d = selective.decide(q, [film, kubrick], model=MODEL, linker=linker)
    assert d.abstained and d.fit == -1 and d.kinds == ["work"]
    d = selective.decide(q, [kubrick, film], model=MODEL, linker=linker)
    assert not d.abstained and d.fit == 1 and d.kinds == ["person"]
    assert selective.decide(q, [film, kubrick], model=MODEL).fit == 0  # no linker: unknown, the confidence decides
    by_qid = _cand("Kubrick", qids=["Q2001"], source="text")  # the candidate's own QID first
    assert selective.candidate_types(by_qid, known={"Q2001": set()}, linker=linker) == {"person"}
    place = _cand("Stanley Kubrick", relations=[("P19", "object")])
    assert selective.candidate_types(place, linker=linker) == {"place"}  # what the KG says wins


def test_the_program_types_candidates_with_its_toolboxs_linker(monkeypatch):
    from hqa.config import load_settings
    from hqa.programs.simple import SimpleHybrid
    from hqa.toolbox import Toolbox
    from tests.conftest import KeepOrderReranker

    monkeypatch.setattr(selective, "calibration", lambda: MODEL)
    passage = Evidence(text="Stanley Kubrick directed it.", source="text", score=1.0,
                       meta={"id": "p1", "title": "Stanley Kubrick"})
    linker = _linker(("Q2001", "Stanley Kubrick", "1968 film by Stanley Kubrick"))
    toolbox = Toolbox(load_settings(environ={}), dense=lambda q, k=5: [passage], bm25=lambda q, k=5: [],
                      linker=linker, sparql=None, reranker=KeepOrderReranker())
    with dspy.context(lm=DummyLM([{"answer": "Zyx"}] * 2), adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox, memory="fallback", abstain="on")(question="Who directed it?")
    sel = pred.trace["selective"]
    assert sel["best"] == "Stanley Kubrick" and sel["candidate_types"] == ["work"] and pred.abstained
