"""SPARQL shared by the guard's tests: read queries of every form that the guard must let through."""

from __future__ import annotations


READS = [
    "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }", "ASK { wd:Q1000 wdt:P36 wd:Q3825 }", "DESCRIBE wd:Q1000",
    "DESCRIBE wd:Q1000 LIMIT 5000", "CONSTRUCT WHERE { wd:Q1000 ?p ?o }", "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
    'SELECT ?x ?xLabel WHERE { wd:Q1000 wdt:P36 ?x . SERVICE wikibase:label { bd:serviceParam wikibase:language "en". } }',
    "SELECT * WHERE { ?s ?p ?o } ORDER BY ?s LIMIT 100000 OFFSET 3",
    "SELECT ?s WHERE { ?s ?p ?o } GROUP BY ?s HAVING(COUNT(?o) > 1)",
    "SELECT * WHERE { { SELECT ?s WHERE { ?s ?p ?o } LIMIT 5 } }",
    'SELECT ?x WHERE { ?x rdfs:label "Zürich 中文 \\" \' # LOAD <x> INSERT"@en }',
    "SELECT ?x WHERE { ?x ?p ?o } # INSERT DATA { <urn:a> <urn:b> <urn:c> }",
    "SELECT * WHERE { ?s ?p ?o } VALUES ?s { wd:Q1000 }",
    "sparql SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }", "```SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }```",
]
