"""``hqa compare --vary``: program-kwargs arms, e.g. SS-CoT Table 3's knowledge-source orders in one command."""

from __future__ import annotations

import pytest

from hqa.errors import ConfigError
from hqa.jobs.compare import parse_vary


def test_parse_vary():
    assert parse_vary("sources=kg,text,model;text,kg,model; model") == (
        ("kg,text,model", {"sources": "kg,text,model"}), ("text,kg,model", {"sources": "text,kg,model"}),
        ("model", {"sources": "model"}))
    assert parse_vary("min_masks=1;2") == (("1", {"min_masks": 1}), ("2", {"min_masks": 2}))
    for bad in ("", "sources", "sources=", "=kg", "two words=kg", "sources=;;"):
        with pytest.raises(ConfigError):
            parse_vary(bad)
