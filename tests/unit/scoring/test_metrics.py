"""Tests for hqa.scoring.metrics with hand-computed expected values."""

from __future__ import annotations

import dspy
import pytest

from hqa.scoring.metrics import (
    METRICS,
    answer_recall,
    em_metric,
    exact_match,
    f1_metric,
    hits1_metric,
    hits_at_1,
    normalize_answer,
    recall_metric,
    score_all,
    split_answers,
    token_f1,
)

# ------------------------------------------------------------------------------------------ normalisation


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   Apple,  a pear ", "apple pear"),
        ("Theatre", "theatre"),  # "the" only removed as a whole word
        ("2021-06-24T00:00:00Z", "2021 06 24"),  # date part kept, as year month day
        ("+1985-01-01T00:00:00Z", "1985 01 01"),
        ("born 2021-06-24T10:20:30+02:00 in Rome", "born 2021 06 24 in rome"),
        ("True", "yes"),
        ("false.", "no"),
        ("true story", "true story"),  # only a lone boolean is mapped
        ("Beyoncé", "beyonce"),
        ("Star Wars: Episode VI – Return of the Jedi", "star wars episode vi return of jedi"),
        (None, ""),
        (42, "42"),
    ],
)
def test_normalize_answer(raw: object, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_iso_date_equals_plain_date() -> None:
    assert normalize_answer("2021-06-24T00:00:00Z") == normalize_answer("2021-06-24")
    assert exact_match("2021-06-24", ["2021-06-24T00:00:00Z"]) == 1.0
    assert exact_match("2021-06-25", ["2021-06-24T00:00:00Z"]) == 0.0


# ------------------------------------------------------------------------------------------ EM / F1 / recall


def test_exact_match() -> None:
    assert exact_match("the Eiffel Tower", ["Eiffel tower."]) == 1.0
    assert exact_match("Eiffel Tower Paris", ["Eiffel Tower"]) == 0.0
    assert exact_match("Redding", ["Sacramento", "redding"]) == 1.0
    assert exact_match("Redding", "Redding") == 1.0  # a single gold string is accepted
    assert exact_match("true", ["Yes"]) == 1.0
    assert exact_match("", ["x"]) == 0.0
    assert exact_match("anything", []) == 0.0
    assert exact_match("the", ["a"]) == 0.0  # both normalise to "", which never matches


def test_token_f1_hand_computed() -> None:
    # pred "the Eiffel tower" → [eiffel, tower]; gold "Eiffel Tower Paris" → [eiffel, tower, paris]
    # overlap 2; precision 2/2 = 1; recall 2/3; F1 = 2·1·(2/3) / (1 + 2/3) = (4/3)/(5/3) = 0.8
    assert token_f1("the Eiffel tower", ["Eiffel Tower Paris"]) == pytest.approx(0.8)
    # pred [new, york, city] vs gold [york]: P = 1/3, R = 1, F1 = 2·(1/3)/(4/3) = 0.5
    assert token_f1("New York City", ["York"]) == pytest.approx(0.5)
    # Max over golds: 0.5 for "york", 1.0 for "new york city".
    assert token_f1("New York City", ["York", "new york city"]) == pytest.approx(1.0)
    # Repeated tokens count with multiplicity: pred [a1, a1] vs gold [a1]: P = 1/2, R = 1, F1 = 2/3
    assert token_f1("a1 a1", ["a1"]) == pytest.approx(2 / 3)
    assert token_f1("Paris", ["London"]) == 0.0
    assert token_f1("", ["London"]) == 0.0


def test_answer_recall_whole_tokens() -> None:
    assert answer_recall("She was born in Redding, California.", ["Redding"]) == 1.0
    assert answer_recall("It happened in 1985.", ["1985"]) == 1.0
    assert answer_recall("Reddington", ["Redding"]) == 0.0  # not a whole-token match
    assert answer_recall("New York City", ["York City"]) == 1.0
    assert answer_recall("Paris", ["Eiffel Tower Paris"]) == 0.0  # gold must be inside pred, not vice versa
    assert answer_recall("anything", []) == 0.0


def test_list_predictions() -> None:
    preds = ["Sacramento", "Redding, California", "Redding"]
    assert exact_match(preds, ["Redding"]) == 1.0  # best element
    assert exact_match(["Sacramento", "Davis"], ["Redding"]) == 0.0
    # Best element F1: "Eiffel Tower" vs gold [eiffel, tower, paris] → P 1, R 2/3 → 0.8; "Louvre" → 0.
    assert token_f1(["Louvre", "Eiffel Tower"], ["Eiffel Tower Paris"]) == pytest.approx(0.8)
    assert answer_recall(["Sacramento", "born in Redding"], ["Redding"]) == 1.0
    assert answer_recall([], ["Redding"]) == 0.0


# ------------------------------------------------------------------------------------------ Hits@1


def test_split_answers() -> None:
    assert split_answers("A | B;C\nD") == ["A", "B", "C", "D"]
    assert split_answers("Smith|Jones") == ["Smith|Jones"]  # "|" needs surrounding spaces
    assert split_answers(" ; ") == []


def test_hits_at_1_first_answer_only() -> None:
    assert hits_at_1("Redding | Sacramento", ["Redding"]) == 1.0
    assert hits_at_1("Sacramento | Redding", ["Redding"]) == 0.0
    assert hits_at_1("Sacramento; Redding", ["Redding"]) == 0.0
    assert hits_at_1("Redding\nSacramento", ["redding"]) == 1.0
    assert hits_at_1(["Sacramento", "Redding"], ["Redding"]) == 0.0
    assert hits_at_1(["Redding", "Sacramento"], ["Redding"]) == 1.0
    assert hits_at_1("", ["Redding"]) == 0.0


def test_hits_at_1_qids() -> None:
    assert hits_at_1("Q42", ["Douglas Adams"], ["Q42"]) == 1.0
    assert hits_at_1("wd:Q42", [], ["Q42"]) == 1.0
    assert hits_at_1("Douglas Adams (Q42)", [], ["Q42"]) == 1.0
    assert hits_at_1("http://www.wikidata.org/entity/Q42", [], ["Q42"]) == 1.0
    assert hits_at_1("Q421", [], ["Q42"]) == 0.0
    assert hits_at_1("Q5 | Q42", [], ["Q42"]) == 0.0  # only the first answer counts
    assert hits_at_1("Q42", ["Douglas Adams"]) == 0.0  # no gold ids given
    # QALD-10 style: QIDs are also the gold labels, so EM alone matches.
    assert hits_at_1("Q42299", ["Q42299"]) == 1.0


def test_score_all() -> None:
    scores = score_all("Eiffel Tower | Louvre", ["Eiffel Tower"], ["Q243"])
    # EM: normalised "eiffel tower louvre" ≠ "eiffel tower" → 0.
    # F1: pred [eiffel, tower, louvre] vs [eiffel, tower]: P 2/3, R 1 → 2·(2/3)/(5/3) = 0.8.
    # Recall: "eiffel tower" is inside the prediction → 1.  Hits@1: first answer "Eiffel Tower" → 1.
    # QALD F1: answer set {eiffel tower, louvre}, gold {eiffel tower}: P 1/2, R 1 → 2·(1/2)/(3/2) = 0.6667.
    assert scores == {"em": 0.0, "f1": pytest.approx(0.8), "recall": 1.0, "hits1": 1.0, "qald_f1": 0.6667}
    assert set(score_all("x", [])) == {"em", "f1", "recall", "hits1", "qald_f1"}


# ------------------------------------------------------------------------------------------ DSPy metrics


def _example(answers: list[str], ids: list[str] | None = None) -> dspy.Example:
    fields: dict = {"question": "q?", "answers": answers}
    if ids is not None:
        fields["answer_ids"] = ids
    return dspy.Example(**fields).with_inputs("question")


def test_dspy_metrics_float_without_trace() -> None:
    ex = _example(["Eiffel Tower Paris"])
    pred = dspy.Prediction(answer="the Eiffel tower")
    assert em_metric(ex, pred) == 0.0
    assert f1_metric(ex, pred) == pytest.approx(0.8)
    assert recall_metric(ex, pred) == 0.0
    assert hits1_metric(ex, pred) == 0.0
    assert isinstance(f1_metric(ex, pred), float)


def test_dspy_metrics_bool_with_trace() -> None:
    ex = _example(["New York City"])
    # F1 of "York" vs [new, york, city]: P 1, R 1/3 → 2·(1/3)/(4/3) = 0.5 → passes at threshold 0.5.
    assert f1_metric(ex, dspy.Prediction(answer="York"), trace=[]) is True
    # F1 of "York Town" vs [new, york, city]: P 1/2, R 1/3 → 2·(1/6)/(5/6) = 0.4 → fails.
    assert f1_metric(ex, dspy.Prediction(answer="York Town"), trace=[]) is False
    assert em_metric(ex, dspy.Prediction(answer="new york city"), trace=[]) is True
    assert em_metric(ex, dspy.Prediction(answer="York"), trace=[]) is False
    assert recall_metric(ex, dspy.Prediction(answer="It is New York City."), trace=[]) is True
    assert recall_metric(ex, dspy.Prediction(answer="York"), trace=[]) is False
    assert hits1_metric(ex, dspy.Prediction(answer="Boston | New York City"), trace=[]) is False


def test_dspy_hits1_uses_answer_ids() -> None:
    assert hits1_metric(_example(["Q42"], ["Q42"]), dspy.Prediction(answer="Q42")) == 1.0
    assert hits1_metric(_example(["Douglas Adams"], ["Q42"]), dspy.Prediction(answer="Q42")) == 1.0
    # Without answer_ids on the example, a QID prediction cannot match a label.
    assert hits1_metric(_example(["Douglas Adams"]), dspy.Prediction(answer="Q42")) == 0.0


def test_dspy_metrics_list_answer_and_missing_answer() -> None:
    ex = _example(["Redding"])
    assert em_metric(ex, dspy.Prediction(answer=["Sacramento", "Redding"])) == 1.0
    assert hits1_metric(ex, dspy.Prediction(answer=["Sacramento", "Redding"])) == 0.0
    assert em_metric(ex, dspy.Prediction(reasoning="no answer field")) == 0.0
    assert em_metric({"answers": ["Redding"]}, {"answer": "redding"}) == 1.0


def test_record_example_roundtrip() -> None:
    from hqa.data.datasets import QARecord

    rec = QARecord("compmix:1", "Where?", ("Redding",), ("Q495361",), "compmix", {})
    ex = rec.to_example()
    assert hits1_metric(ex, dspy.Prediction(answer="Q495361")) == 1.0
    assert em_metric(ex, dspy.Prediction(answer="redding."), trace=object()) is True


def test_metrics_registry() -> None:
    assert METRICS == {"em": em_metric, "f1": f1_metric, "recall": recall_metric, "hits1": hits1_metric}


@pytest.mark.parametrize("value,empty", [
    (None, True), ("", True), ("None", True), ("[None]", True), ("[]", True), ("unknown.", True), ("N/A", True),
    ("I don't know", True), ("Not mentioned in the passages", True), ("The passages do not say", True),
    (["none"], True), ('"null"', True),
    ("no", False), ("No", False), ("0", False), ("Noname Island", False), ("Unknown Soldier (film)", False),
    ("Libreville", False), (["Libreville", "Gabon"], False),
])
def test_is_empty_answer_is_the_one_definition(value, empty):
    from hqa.scoring.answers import answer_or_none
    from hqa.scoring.metrics import is_empty_answer
    from hqa.programs.sscot import is_unknown

    assert is_empty_answer(value) is empty
    if isinstance(value, str) or value is None:  # every caller agrees with it: an LM's answer, cleaned first
        assert (answer_or_none(value, clean=True) is None) is empty
        assert is_unknown(value) is empty
    assert (answer_or_none(value) is None) is empty  # a row's or a source's answer (reports, trace parser)


def test_calendar_dates_compare_as_dates_whatever_their_spelling():
    for pred in ("21 May 1994", "May 21, 1994", "May 21 1994", "1994-05-21", "1994-05-21T00:00:00Z"):
        assert exact_match(pred, ["May 21 1994"]) == 1.0, pred
    assert answer_recall("It opened on 21 May 1994 in Cannes.", ["May 21, 1994"]) == 1.0
    assert answer_recall("28 October 2021", ["2021"]) == 1.0  # the year of a full date is still a year
    assert exact_match("21 May 1994", ["22 May 1994"]) == 0.0 and answer_recall("1994", ["May 21 1994"]) == 0.0
    assert normalize_answer("May the force be with you") == "may force be with you"  # a month word alone is a word


# -- QALD answer-set measures (GERBIL QA "Macro F1 QALD"; HumanIQ Table 2) ---------------------------------------
def test_qald_prf_hand_computed_cases() -> None:
    from hqa.scoring.metrics import qald_prf

    # both empty: the system correctly says nothing → 1 / 1 / 1
    assert qald_prf("None", []) == (1.0, 1.0, 1.0)
    assert qald_prf("", []) == (1.0, 1.0, 1.0)
    # gold empty, system answers → 0 / 0 / 0
    assert qald_prf("Berlin", []) == (0.0, 0.0, 0.0)
    # gold non-empty, system gives no answer ("I don't know" is no answer) → precision 1, recall 0, F 0
    assert qald_prf("I don't know", ["Berlin"]) == (1.0, 0.0, 0.0)
    assert qald_prf(None, ["Berlin"]) == (1.0, 0.0, 0.0)
    # wrong answers only → 0 / 0 / 0
    assert qald_prf("Paris | Rome", ["Berlin"]) == (0.0, 0.0, 0.0)
    # 3 answers, 2 right, of 4 golds: P 2/3, R 2/4, F 2·(2/3)(1/2)/(7/6) = 4/7
    p, r, f = qald_prf("Berlin | Hamburg; Paris", ["Berlin", "Hamburg", "Munich", "Cologne"])
    assert (p, r) == (pytest.approx(2 / 3), 0.5) and f == pytest.approx(4 / 7)
    # a duplicated answer counts once; normalisation applies ("The Beatles" = "beatles")
    assert qald_prf("The Beatles | beatles", ["Beatles"]) == (1.0, 1.0, 1.0)
    # QALD-10 entity golds are QIDs: an answer naming the QID matches it
    assert qald_prf("Douglas Adams (Q42)", ["Q42"], ["Q42"]) == (1.0, 1.0, 1.0)
    assert qald_prf("Douglas Adams (Q42)", ["Q42"], []) == (0.0, 0.0, 0.0)  # a QID that is no gold id: no match


def test_macro_f1_qald_averages_per_question_and_takes_harmonic_mean() -> None:
    from hqa.scoring.metrics import macro_f1_qald

    items = [("Berlin", ["Berlin"], []),          # P 1, R 1, F 1
             ("", ["Rome"], []),                  # no answer: P 1, R 0, F 0
             ("Paris | Lyon", ["Paris"], []),     # P 1/2, R 1, F 2/3
             ("Oslo", [], [])]                    # gold empty, answered: 0 0 0
    out = macro_f1_qald(items)
    # macro P = (1 + 1 + 0.5 + 0) / 4 = 0.625; macro R = (1 + 0 + 1 + 0) / 4 = 0.5
    # F1 QALD = 2·0.625·0.5 / 1.125 = 0.5556; Macro F1 = (1 + 0 + 2/3 + 0) / 4 = 0.4167
    assert out == {"n": 4, "precision": 0.625, "recall": 0.5, "f1": 0.4167, "f1_qald": 0.5556}
    assert macro_f1_qald([])["f1_qald"] is None
