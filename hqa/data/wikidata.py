"""Wikidata namespaces, label normalisation and small helpers shared by the pack builder, the linkers and the SPARQL
layer."""

from __future__ import annotations

import re
import unicodedata

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

WS = re.compile(r"\s+")
PUNCT = re.compile(r"[^\w\s]")


def norm_label(text: str) -> str:
    """The comparable form of a label: NFKC, lower case, punctuation as spaces, whitespace folded (what linkers index
    and the answerable-subset definition compares)."""
    text = unicodedata.normalize("NFKC", text or "").lower()
    return WS.sub(" ", PUNCT.sub(" ", text)).strip()


def prefix_block(query: str = "") -> str:
    """PREFIX lines for every Wikidata prefix the query does not declare itself."""
    declared = {m.lower() for m in re.findall(r"PREFIX\s+([A-Za-z][\w-]*)\s*:", query, flags=re.I)}
    return "".join(f"PREFIX {k}: <{v}>\n" for k, v in PREFIXES.items() if k.lower() not in declared)


def local_id(iri: str) -> str | None:
    """``http://www.wikidata.org/entity/Q42`` → ``Q42`` (also for prop/direct etc.); None for other IRIs."""
    m = ENTITY_IRI_RE.match(iri)
    return m.group(1) if m else None


# Well-known Wikidata properties (id, label, aliases).  Used to fill gaps in a pack's property labels.
# Ids and English labels are Wikidata's own (https://www.wikidata.org/wiki/Property:P<n>, CC0); aliases are a
# selection of the English aliases listed there plus common paraphrases.
WELL_KNOWN_PROPERTIES: list[dict] = [
    {"id": "P6", "label": "head of government", "aliases": ["prime minister", "mayor", "premier"]},
    {"id": "P17", "label": "country", "aliases": ["located in country", "nation"]},
    {"id": "P19", "label": "place of birth", "aliases": ["born in", "birthplace", "birth place"]},
    {"id": "P20", "label": "place of death", "aliases": ["died in", "death place"]},
    {"id": "P21", "label": "sex or gender", "aliases": ["gender", "sex"]},
    {"id": "P22", "label": "father", "aliases": ["dad"]},
    {"id": "P25", "label": "mother", "aliases": ["mom"]},
    {"id": "P26", "label": "spouse", "aliases": ["married to", "wife", "husband"]},
    {"id": "P27", "label": "country of citizenship", "aliases": ["citizenship", "nationality"]},
    {"id": "P30", "label": "continent", "aliases": []},
    {"id": "P31", "label": "instance of", "aliases": ["type of"]},
    {"id": "P35", "label": "head of state", "aliases": ["president", "monarch", "king", "queen"]},
    {"id": "P36", "label": "capital", "aliases": ["capital city", "has capital"]},
    {"id": "P37", "label": "official language", "aliases": ["language"]},
    {"id": "P38", "label": "currency", "aliases": []},
    {"id": "P39", "label": "position held", "aliases": ["office held", "office"]},
    {"id": "P40", "label": "child", "aliases": ["children", "son", "daughter"]},
    {"id": "P47", "label": "shares border with", "aliases": ["borders", "neighbor", "neighbour"]},
    {"id": "P50", "label": "author", "aliases": ["written by", "writer"]},
    {"id": "P57", "label": "director", "aliases": ["directed by"]},
    {"id": "P58", "label": "screenwriter", "aliases": ["screenplay by"]},
    {"id": "P69", "label": "educated at", "aliases": ["alma mater", "studied at"]},
    {"id": "P84", "label": "architect", "aliases": ["designed by"]},
    {"id": "P86", "label": "composer", "aliases": ["composed by", "music by"]},
    {"id": "P102", "label": "member of political party", "aliases": ["political party"]},
    {"id": "P106", "label": "occupation", "aliases": ["profession"]},
    {"id": "P108", "label": "employer", "aliases": ["works for", "employed by"]},
    {"id": "P112", "label": "founded by", "aliases": ["founder"]},
    {"id": "P127", "label": "owned by", "aliases": ["owner"]},
    {"id": "P131", "label": "located in the administrative territorial entity", "aliases": ["located in"]},
    {"id": "P136", "label": "genre", "aliases": []},
    {"id": "P138", "label": "named after", "aliases": ["named for"]},
    {"id": "P155", "label": "follows", "aliases": ["preceded by", "predecessor"]},
    {"id": "P156", "label": "followed by", "aliases": ["succeeded by", "successor"]},
    {"id": "P159", "label": "headquarters location", "aliases": ["headquarters", "headquartered in"]},
    {"id": "P161", "label": "cast member", "aliases": ["starring", "actor", "cast"]},
    {"id": "P166", "label": "award received", "aliases": ["award", "won award"]},
    {"id": "P169", "label": "chief executive officer", "aliases": ["ceo"]},
    {"id": "P170", "label": "creator", "aliases": ["created by"]},
    {"id": "P175", "label": "performer", "aliases": ["performed by", "singer", "artist"]},
    {"id": "P206", "label": "located in or next to body of water", "aliases": []},
    {"id": "P264", "label": "record label", "aliases": ["music label"]},
    {"id": "P276", "label": "location", "aliases": []},
    {"id": "P279", "label": "subclass of", "aliases": []},
    {"id": "P361", "label": "part of", "aliases": []},
    {"id": "P364", "label": "original language of film or TV show", "aliases": ["original language"]},
    {"id": "P403", "label": "mouth of the watercourse", "aliases": ["flows into", "mouth"]},
    {"id": "P495", "label": "country of origin", "aliases": ["origin country"]},
    {"id": "P527", "label": "has part(s)", "aliases": ["has part", "consists of"]},
    {"id": "P569", "label": "date of birth", "aliases": ["birth date", "born on", "birthday"]},
    {"id": "P570", "label": "date of death", "aliases": ["death date", "died on"]},
    {"id": "P571", "label": "inception", "aliases": ["founded", "founding date", "date founded", "established",
                                                     "founded in", "creation date", "year founded"]},
    {"id": "P577", "label": "publication date", "aliases": ["release date", "released", "published"]},
    {"id": "P580", "label": "start time", "aliases": ["start date", "began"]},
    {"id": "P582", "label": "end time", "aliases": ["end date", "ended"]},
    {"id": "P585", "label": "point in time", "aliases": ["date of event"]},
    {"id": "P625", "label": "coordinate location", "aliases": ["coordinates"]},
    {"id": "P737", "label": "influenced by", "aliases": []},
    {"id": "P750", "label": "distributed by", "aliases": ["distributor"]},
    {"id": "P921", "label": "main subject", "aliases": ["topic", "subject"]},
    {"id": "P1082", "label": "population", "aliases": ["number of inhabitants", "inhabitants"]},
    {"id": "P1376", "label": "capital of", "aliases": []},
    {"id": "P1412", "label": "languages spoken, written or signed", "aliases": ["languages spoken"]},
    {"id": "P1448", "label": "official name", "aliases": []},
    {"id": "P2046", "label": "area", "aliases": ["surface area"]},
    {"id": "P2048", "label": "height", "aliases": ["tall"]},
    {"id": "P3373", "label": "sibling", "aliases": ["brother", "sister"]},
]


_NT_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", re.S)
_NT_ECHARS = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def unescape_nt(s: str) -> str:
    """The value of an N-Triples string body: its ECHAR and UCHAR escapes decoded
    (https://www.w3.org/TR/n-triples/#grammar-production-ECHAR)."""
    if "\\" not in s:
        return s

    def sub(m: re.Match) -> str:
        e = m.group(1)
        if e[0] in "uU" and len(e) > 1:
            return chr(int(e[1:], 16))
        return _NT_ECHARS.get(e, e)

    return _NT_ESCAPE.sub(sub, s)


_ISO_DAY = re.compile(r"^[+]?(-?\d{4,}-\d{2}-\d{2})T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?$")


def render_value(value: str, labels: dict[str, str] | None = None) -> str:
    """A KG value for display — the one renderer of the programs: an entity IRI → its label (else its id), an ISO
    datetime → its date, anything else as is."""
    lid = local_id(value)
    if lid:
        return (labels or {}).get(lid, lid)
    m = _ISO_DAY.match(value.strip())
    return m.group(1) if m else value


def strip_disambiguation(title: str) -> str:
    """A page title without its trailing disambiguation: ``Mercury (planet)`` → ``Mercury``."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()
