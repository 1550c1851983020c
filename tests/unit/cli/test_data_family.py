"""``hqa data pull`` takes a dataset family for all its splits (README named ``qald9plus-wikidata``, which is no
dataset of its own): issue 53."""

from hqa.cli.data import family
from hqa.data import store


def test_a_family_name_pulls_every_split_and_a_dataset_name_itself():
    known = store.datasets()
    assert family("qald9plus-wikidata", known) == ["qald9plus-wikidata/test", "qald9plus-wikidata/train"]
    assert family("mintaka", known) == ["mintaka/test", "mintaka/dev", "mintaka/train"]
    assert family("mintaka/test", known) == ["mintaka/test"] and family("qald10", known) == ["qald10"]
    assert family("no-such-set", known) == ["no-such-set"]  # refused later, with the known names
