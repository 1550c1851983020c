"""Wikidata namespaces and small helpers shared by the pack builder and the SPARQL layer."""

from __future__ import annotations

import re

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"
P = "http://www.wikidata.org/prop/"
PS = "http://www.wikidata.org/prop/statement/"
PQ = "http://www.wikidata.org/prop/qualifier/"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
SKOS_ALT = "http://www.w3.org/2004/02/skos/core#altLabel"
SCHEMA_DESC = "http://schema.org/description"
XSD = "http://www.w3.org/2001/XMLSchema#"

PREFIXES = {
    "wd": WD,
    "wdt": WDT,
    "p": P,
    "ps": PS,
    "pq": PQ,
    "wikibase": "http://wikiba.se/ontology#",
    "bd": "http://www.bigdata.com/rdf#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "schema": "http://schema.org/",
    "xsd": XSD,
}

QID_RE = re.compile(r"\b([QP]\d+)\b")
ENTITY_IRI_RE = re.compile(r"^http://www\.wikidata\.org/(?:entity|prop/direct|prop/statement|prop)/([QP]\d+)$")


def prefix_block(query: str = "") -> str:
    """PREFIX lines for every Wikidata prefix the query does not declare itself."""
    declared = {m.lower() for m in re.findall(r"PREFIX\s+([A-Za-z][\w-]*)\s*:", query, flags=re.I)}
    return "".join(f"PREFIX {k}: <{v}>\n" for k, v in PREFIXES.items() if k.lower() not in declared)


def local_id(iri: str) -> str | None:
    """``http://www.wikidata.org/entity/Q42`` → ``Q42`` (also for prop/direct etc.); None for other IRIs."""
    m = ENTITY_IRI_RE.match(iri)
    return m.group(1) if m else None


def entity_iri(qid: str) -> str:
    return WD + qid


def prop_iri(pid: str) -> str:
    return WDT + pid
