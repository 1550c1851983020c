"""Worlds built from generated Wikidata dumps in the real formats: truthy N-Triples and the JSON entity dump (plain,
gzip, bzip2), filters, the manifest, resuming after an interruption or a full disk, and bad input."""

from __future__ import annotations


from hqa.world.dumps import render_datavalue, truthy_claims

WD = "http://www.wikidata.org/entity/"


def test_truthy_values_and_ranks():
    """Wikidata's RDF rendering (https://www.mediawiki.org/wiki/Wikibase/Indexing/RDF_Dump_Format) of each value
    type, and rank selection: preferred wins, deprecated and novalue never appear."""
    def st(rank, dv, datatype="wikibase-item", snaktype="value"):
        snak = {"snaktype": snaktype, "property": "P1", "datatype": datatype}
        if dv is not None:
            snak["datavalue"] = dv
        return {"mainsnak": snak, "rank": rank, "type": "statement"}

    item = lambda q: {"value": {"entity-type": "item", "numeric-id": q, "id": f"Q{q}"}, "type": "wikibase-entityid"}  # noqa: E731
    claims = {"P31": [st("normal", item(1)), st("preferred", item(2)), st("deprecated", item(3))],
              "P17": [st("normal", item(4)), st("deprecated", item(5)), st("normal", None, snaktype="novalue")],
              "P50": [st("deprecated", item(6))]}
    assert sorted(truthy_claims(claims)) == [("P17", f"<{WD}Q4>"), ("P31", f"<{WD}Q2>")]
    cases = [
        ("time", {"type": "time", "value": {"time": "+1952-03-11T00:00:00Z", "precision": 11}},
         f'"1952-03-11T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'),
        ("time", {"type": "time", "value": {"time": "+1879-00-00T00:00:00Z", "precision": 9}},
         f'"1879-01-01T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'),
        ("time", {"type": "time", "value": {"time": "-0100-00-00T00:00:00Z", "precision": 9}},
         f'"-0100-01-01T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'),
        ("quantity", {"type": "quantity", "value": {"amount": "+8.5", "unit": "http://www.wikidata.org/entity/Q11573"}},
         '"8.5"^^<http://www.w3.org/2001/XMLSchema#decimal>'),
        ("monolingualtext", {"type": "monolingualtext", "value": {"text": 'Le "Roi"', "language": "fr"}},
         '"Le \\"Roi\\""@fr'),
        ("globe-coordinate", {"type": "globecoordinate", "value": {"latitude": 52.5, "longitude": 13.4,
                                                                  "globe": "http://www.wikidata.org/entity/Q2"}},
         '"Point(13.4 52.5)"^^<http://www.opengis.net/ont/geosparql#wktLiteral>'),
        ("url", {"type": "string", "value": "https://example.org/a"}, "<https://example.org/a>"),
        ("commonsMedia", {"type": "string", "value": "Douglas adams portrait.jpg"},
         "<http://commons.wikimedia.org/wiki/Special:FilePath/Douglas_adams_portrait.jpg>"),
        ("external-id", {"type": "string", "value": "113230702"}, '"113230702"'),
        ("wikibase-property", {"type": "wikibase-entityid", "value": {"entity-type": "property", "numeric-id": 31}},
         f"<{WD}P31>"),
    ]
    for datatype, dv, term in cases:
        assert render_datavalue(datatype, dv) == term, (datatype, dv)
