"""The one cell format of every report (hqa.reports.markdown.fmt): the run report's four-place floats with trailing
zeros dropped, and DIVKNOWQA's one-decimal percentages, from one helper."""

from __future__ import annotations

import pytest

from hqa.reports.markdown import fmt, table


@pytest.mark.parametrize("value, text", [
    (None, "–"), (3, "3"), ("DETLLM", "DETLLM"), (True, "True"),
    (0.5, "0.5"), (1.0, "1.0"), (0.25, "0.25"), (2 / 3, "0.6667"), (0.00004, "0.0"), (12.30001, "12.3"),
    (-0.125, "-0.125"), (float("nan"), "nan"),
])
def test_the_run_report_prints_at_most_four_places_without_trailing_zeros(value, text):
    assert fmt(value) == text


@pytest.mark.parametrize("value", [0.0, 1.0, 30.0, 31.25, 45.45, 52.17391, 99.96, 100.0, -0.04, 7.66, 0.05])
def test_one_digit_prints_every_float_as_divknowqas_tables_always_did(value):
    assert fmt(value, 1) == f"{value:.1f}"


def test_a_table_formats_its_cells_with_the_digits_given():
    assert table(["a", "b"], [[0.5, None], [31.25, 2]], digits=1) == [
        "| a | b |", "|---|---|", "| 0.5 | – |", "| 31.2 | 2 |", ""]
    assert table(["a"], [[2 / 3]]) == ["| a |", "|---|", "| 0.6667 |", ""]
