"""Benchmark loaders: CompMix, QALD-10, QALD-9-plus (DBpedia and Wikidata), Bamboogle, Mintaka and the HumanIQ
question lists.

The files live in the data directory (:mod:`hqa.data.store`; ``hqa data list`` names each origin, commit and
license), fetched from their public origin or a mirror on first use.  Every loader returns ``list[QARecord]`` in
file order and takes an optional ``path`` to read the same format from another file.

Any problem with a file — missing, not UTF-8, invalid JSON, a record without a required field, duplicate ids —
raises :class:`hqa.errors.DataError` with a one-line message naming the file and the record.

Gold answers per dataset:

* CompMix: ``answers`` = answer labels; ``answer_ids`` = those answer ids that are QIDs (others are dates,
  numbers or strings).
* QALD-10: the file has no labels, so an entity answer appears as its QID in *both* ``answers`` and
  ``answer_ids`` (metrics compare QIDs against ``answer_ids``); literals are their lexical value; booleans
  "yes"/"no"; non-Wikidata URIs are kept whole.
* QALD-9-plus (Wikidata): as QALD-10.
* QALD-9-plus (DBpedia): a ``http://dbpedia.org/resource/X_Y`` answer becomes "X Y" (percent-decoded);
  other URIs are kept whole.  35 of the 150 questions have an empty gold result set (``answers == ()``).
* Bamboogle: ``answers = (Answer,)``; the gold two-hop decomposition is in ``meta["decomposition"]``.
* Mintaka: entity labels (+ QIDs in ``answer_ids``), booleans "yes"/"no", other values as strings.  For
  ``complexityType == "count"`` the gold answer is the count ``answerNum`` and the listed entities move to
  ``meta["answer_entities"]``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from hqa.data.jsonl import read_jsonl
from hqa.data.store import require
from hqa.errors import DataError

if TYPE_CHECKING:  # pragma: no cover
    import dspy

__all__ = ["COMPMIX_SPLITS", "DATASET_SPECS", "EVAL_SETS", "MIRROR_ONLY_SETS", "MODIFIERS", "HUMANIQ_LISTS", "QARecord",
           "load_bamboogle", "load_compmix", "load_compmix_release", "load_dataset", "load_humaniq_compmix",
           "load_humaniq_questions", "load_mintaka", "load_mintaka_split", "load_qald10", "load_qald9plus",
           "load_qald9plus_wikidata", "question_key"]

COMPMIX_SPLITS = ("test", "dev", "train")
HUMANIQ_LISTS = ("mintaka", "compmix", "qald_full", "qald", "qald_trial")

_QID_RE = re.compile(r"^Q\d+$")
_WIKIDATA_ENTITY = "http://www.wikidata.org/entity/"
_DBPEDIA_RESOURCE = "http://dbpedia.org/resource/"

PathLike = str | os.PathLike[str]


# ------------------------------------------------------------------------------------------------ record type


@dataclass(frozen=True)
class QARecord:
    """One benchmark question with its gold answers.

    ``id`` is ``"<dataset>:<original id>"`` and unique within a dataset.  ``answers`` holds every gold
    label/string (booleans as "yes"/"no"); ``answer_ids`` the gold Wikidata QIDs where known.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    answer_ids: tuple[str, ...]
    dataset: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False)

    def question_entities(self) -> list[str]:
        """Gold QIDs of the entities the question is about: CompMix ``entities``, Mintaka ``questionEntity``, the
        ``wd:Q…`` constants of a QALD-10 gold query."""
        meta = self.meta
        ids = [e.get("id") for e in meta.get("entities", []) or [] if isinstance(e, dict)]
        ids += [str(e.get("name")) for e in meta.get("questionEntity", []) or [] if isinstance(e, dict)]
        if meta.get("sparql"):
            ids += re.findall(r"(?:wd:|/entity/)(Q\d+)\b", meta["sparql"])
        return list(dict.fromkeys(i for i in ids if i and re.fullmatch(r"Q\d+", i)))

    def to_example(self) -> "dspy.Example":
        """This record as a ``dspy.Example`` whose only input is ``question`` (gold entities and a gold
        decomposition ride along for the evaluation reports).  ``answer`` is the first gold answer, so a labeled
        demo of a predictor that writes an ``answer`` shows it; the metrics score against all of ``answers``."""
        import dspy

        extra = {"answer": self.answers[0]} if self.answers else {}
        return dspy.Example(
            **extra,
            question=self.question,
            answers=list(self.answers),
            answer_ids=list(self.answer_ids),
            id=self.id,
            dataset=self.dataset,
            gold_entities=self.question_entities(),
            decomposition=self.meta.get("decomposition"),
        ).with_inputs("question")


# ------------------------------------------------------------------------------------------------ file access


def read_head(path: PathLike, n: int = -1) -> bytes:
    """The first ``n`` bytes of a data file (all with ``n = -1``); a missing, unreadable or directory path is one
    :class:`DataError` line."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            return fh.read(n)
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{p}: is a directory, expected a file") from None
    except OSError as exc:
        raise DataError(f"{p}: cannot read file ({exc.strerror or exc})") from None


def _read_text(path: PathLike) -> str:
    """Read a UTF-8 text file (a BOM is tolerated), converting failures to :class:`DataError`."""
    return _decode(read_head(Path(path)), Path(path))


def _decode(raw: bytes, where: PathLike | str) -> str:
    """``raw`` as UTF-8 text (a BOM is tolerated); other bytes are a :class:`DataError` naming ``where``."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{where}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}, line {line})"
        ) from None


def read_json(path: PathLike) -> Any:
    """Parse a JSON file; missing file, bad encoding or bad JSON raise :class:`DataError`."""
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


# ------------------------------------------------------------------------------------------------ validation


class _Ctx:
    """Where a record came from, for error messages: file, index and (once known) id."""

    def __init__(self, path: PathLike, index: int, rid: Any = None) -> None:
        self.path, self.index, self.rid = path, index, rid

    def error(self, what: str) -> DataError:
        where = f"record {self.index}" if self.rid is None else f"record {self.index} (id {self.rid!r})"
        return DataError(f"{self.path}: {where}: {what}")


def _require(rec: dict[str, Any], key: str, ctx: _Ctx, types: type | tuple[type, ...] = object) -> Any:
    """``rec[key]``, which must exist, be non-null and of ``types``."""
    if key not in rec or rec[key] is None:
        raise ctx.error(f"missing required field {key!r}")
    value = rec[key]
    wanted = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, wanted) or (isinstance(value, bool) and int in wanted and bool not in wanted):
        names = "/".join(t.__name__ for t in wanted)
        raise ctx.error(f"field {key!r} must be {names}, got {type(value).__name__}")
    return value


def _require_text(rec: dict[str, Any], key: str, ctx: _Ctx) -> str:
    """A required non-empty string field, stripped."""
    value = _require(rec, key, ctx, str).strip()
    if not value:
        raise ctx.error(f"field {key!r} is empty")
    return value


def _require_id(rec: dict[str, Any], key: str, ctx: _Ctx) -> str:
    """A required id field (string or integer), as a string; also recorded in ``ctx`` for later messages."""
    value = _require(rec, key, ctx, (str, int))
    text = str(value).strip()
    if not text:
        raise ctx.error(f"field {key!r} is empty")
    ctx.rid = text
    return text


def records_list(data: Any, path: PathLike, key: str | None = None) -> list[Any]:
    """The list of raw records: ``data`` itself or ``data[key]``."""
    if key is not None:
        if not isinstance(data, dict) or key not in data:
            raise DataError(f"{path}: expected a JSON object with a {key!r} list")
        data = data[key]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return data


def _dedupe(values: Iterable[str]) -> tuple[str, ...]:
    """Drop empty strings and repeats, keeping order."""
    return tuple(dict.fromkeys(v for v in values if v))


def _load_records(
    raw: list[Any], path: PathLike, parse: Callable[[dict[str, Any], _Ctx], QARecord]
) -> list[QARecord]:
    """Apply ``parse`` to every raw record, then check that no two share an id."""
    out: list[QARecord] = []
    for i, obj in enumerate(raw):
        ctx = _Ctx(path, i)
        if not isinstance(obj, dict):
            raise ctx.error(f"expected a JSON object, got {type(obj).__name__}")
        out.append(parse(obj, ctx))
    seen: dict[str, int] = {}
    for i, rec in enumerate(out):
        if rec.id in seen:
            raise DataError(f"{path}: record {i}: duplicate id {rec.id!r} (first at record {seen[rec.id]})")
        seen[rec.id] = i
    return out


# ------------------------------------------------------------------------------------------------ CompMix


def load_compmix(split: str = "test", path: PathLike | None = None) -> list[QARecord]:
    """CompMix ``{split}_set.json`` (test 2764, dev 1680, train 4966 records; the UniHGKR repository's copy)."""
    if split not in COMPMIX_SPLITS:
        raise DataError(f"unknown CompMix split {split!r}; valid: {', '.join(COMPMIX_SPLITS)}")
    p = Path(path) if path is not None else require(f"compmix/{split}_set.json")
    return _compmix_records(records_list(read_json(p), p), p, split)


def load_compmix_release(split: str = "test", path: PathLike | None = None) -> list[QARecord]:
    """CompMix from its authors' release (Hugging Face ``pchristm/CompMix``): ``{split}_set.zip`` holding
    ``{split}_set.jsonl``, one record per line in the same schema as :func:`load_compmix`."""
    import zipfile

    if split not in COMPMIX_SPLITS:
        raise DataError(f"unknown CompMix split {split!r}; valid: {', '.join(COMPMIX_SPLITS)}")
    p = Path(path) if path is not None else require(f"compmix-release/{split}_set.zip")
    member = f"{split}_set.jsonl"
    try:
        with zipfile.ZipFile(p) as zf:
            raw = zf.read(member)
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    except KeyError:
        raise DataError(f"{p}: the zip has no member {member!r}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{p}: not a readable zip file ({exc})") from None
    where = f"{p}!{member}"
    records = []
    for n, line in enumerate(_decode(raw, where).splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: line {n}: invalid JSON ({exc.msg})") from None
    return _compmix_records(records, where, split)


def _compmix_records(raw: list[Any], p: PathLike, split: str) -> list[QARecord]:

    def parse(rec: dict[str, Any], ctx: _Ctx) -> QARecord:
        qid = _require_id(rec, "question_id", ctx)
        question = _require_text(rec, "question", ctx)
        labels, ids = [], []
        for j, ans in enumerate(_require(rec, "answers", ctx, list)):
            if not isinstance(ans, dict) or not isinstance(ans.get("label"), str):
                raise ctx.error(f"answers[{j}] must be an object with a string 'label'")
            label = ans["label"].strip()
            labels.append(label.lower() if label.lower() in ("yes", "no") else label)
            aid = str(ans.get("id") or "").strip()
            if _QID_RE.match(aid):
                ids.append(aid)
        entities = [
            {"id": e.get("id"), "label": e.get("label")} for e in rec.get("entities") or [] if isinstance(e, dict)
        ]
        meta = {
            "split": split,
            "domain": rec.get("domain"),
            "answer_src": rec.get("answer_src"),
            "answer_text": rec.get("answer_text"),
            "entities": entities,
            "convmix_question_id": rec.get("convmix_question_id"),
            "raw_answer_ids": [str(a.get("id")) for a in rec["answers"] if isinstance(a, dict) and a.get("id")],
        }
        return QARecord(f"compmix:{qid}", question, _dedupe(labels), _dedupe(ids), "compmix", meta)

    return _load_records(raw, p, parse)


# ------------------------------------------------------------------------------------------------ QALD


def _qald_question(rec: dict[str, Any], ctx: _Ctx, language: str) -> str:
    """The question string in ``language`` from QALD's ``question: [{language, string}]`` list."""
    for item in _require(rec, "question", ctx, list):
        if isinstance(item, dict) and item.get("language") == language:
            text = item.get("string")
            if isinstance(text, str) and text.strip():
                return text.strip()
    raise ctx.error(f"no {language!r} question string")


def _qald_answers(
    rec: dict[str, Any], ctx: _Ctx, map_uri: Callable[[str], tuple[str, str | None]]
) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """(answers, answer_ids, answer_type) from QALD ``answers[0]`` (SPARQL JSON results or boolean).

    ``map_uri`` turns a URI into ``(answer string, QID or None)``.  ``answer_type`` is "boolean",
    "resource", "literal", "mixed" or "empty".
    """
    blocks = _require(rec, "answers", ctx, list)
    if not blocks:
        return (), (), "empty"
    block = blocks[0]
    if not isinstance(block, dict):
        raise ctx.error("answers[0] must be a JSON object")
    if "boolean" in block:
        if not isinstance(block["boolean"], bool):
            raise ctx.error("answers[0].boolean must be true/false")
        return ("yes" if block["boolean"] else "no",), (), "boolean"
    results = block.get("results")
    if not isinstance(results, dict) or not isinstance(results.get("bindings"), list):
        raise ctx.error("answers[0] has neither 'boolean' nor 'results.bindings'")
    labels, ids, kinds = [], [], set()
    for j, binding in enumerate(results["bindings"]):
        if not isinstance(binding, dict):
            raise ctx.error(f"answers[0].results.bindings[{j}] must be a JSON object")
        for var, term in binding.items():
            if not isinstance(term, dict) or not isinstance(term.get("value"), str):
                raise ctx.error(f"answers[0].results.bindings[{j}].{var} has no string 'value'")
            if term.get("type") == "uri":
                label, qid = map_uri(term["value"])
                kinds.add("resource")
                if qid:
                    ids.append(qid)
            else:
                label = term["value"].strip()
                kinds.add("literal")
            labels.append(label)
    kind = "empty" if not kinds else kinds.pop() if len(kinds) == 1 else "mixed"
    return _dedupe(labels), _dedupe(ids), kind


def _wikidata_uri(uri: str) -> tuple[str, str | None]:
    """Wikidata entity URI → (QID, QID); any other URI is kept whole."""
    if uri.startswith(_WIKIDATA_ENTITY):
        local = uri[len(_WIKIDATA_ENTITY) :]
        if _QID_RE.match(local):
            return local, local
    return uri, None


def _dbpedia_uri(uri: str) -> tuple[str, str | None]:
    """DBpedia resource URI → its name with underscores as spaces; any other URI is kept whole."""
    if uri.startswith(_DBPEDIA_RESOURCE):
        name = unquote(uri[len(_DBPEDIA_RESOURCE) :]).replace("_", " ")
        return " ".join(name.split()), None
    return uri, None


def _load_qald(
    path: Path, dataset: str, language: str, map_uri: Callable[[str], tuple[str, str | None]]
) -> list[QARecord]:
    def parse(rec: dict[str, Any], ctx: _Ctx) -> QARecord:
        qid = _require_id(rec, "id", ctx)
        question = _qald_question(rec, ctx, language)
        answers, answer_ids, kind = _qald_answers(rec, ctx, map_uri)
        query = rec.get("query") if isinstance(rec.get("query"), dict) else {}
        meta: dict[str, Any] = {"sparql": query.get("sparql"), "answer_type": kind}
        if "aggregation" in rec:
            meta["aggregation"] = rec["aggregation"]
        return QARecord(f"{dataset}:{qid}", question, answers, answer_ids, dataset, meta)

    return _load_records(records_list(read_json(path), path, "questions"), path, parse)


def load_qald10(path: PathLike | None = None, language: str = "en") -> list[QARecord]:
    """QALD-10 (Wikidata; 394 questions).  Entity answers are QIDs in both ``answers`` and ``answer_ids``."""
    p = Path(path) if path is not None else require("qald10/qald_10.json")
    return _load_qald(p, "qald10", language, _wikidata_uri)


def load_qald9plus(path: PathLike | None = None, language: str = "en") -> list[QARecord]:
    """QALD-9-plus test on DBpedia (150 questions); resource answers become their page names."""
    p = Path(path) if path is not None else require("qald9plus/qald_9_plus_test_dbpedia.json")
    return _load_qald(p, "qald9plus", language, _dbpedia_uri)


def load_qald9plus_wikidata(split: str = "test", path: PathLike | None = None, language: str = "en") -> list[QARecord]:
    """QALD-9-plus on Wikidata (``qald_9_plus_{split}_wikidata.json``): entity answers are QIDs, as in QALD-10."""
    if split not in ("test", "train"):
        raise DataError(f"unknown QALD-9-plus split {split!r}; valid: test, train")
    p = Path(path) if path is not None else require(f"qald9plus/qald_9_plus_{split}_wikidata.json")
    return _load_qald(p, "qald9plus-wikidata", language, _wikidata_uri)


# ------------------------------------------------------------------------------------------------ Bamboogle


def _str_list(value: Any, key: str, ctx: _Ctx) -> list[str]:
    """A string or list of strings as a list of stripped strings."""
    if isinstance(value, str):
        return [value.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value]
    raise ctx.error(f"field {key!r} must be a string or a list of strings")


def load_bamboogle(path: PathLike | None = None) -> list[QARecord]:
    """Bamboogle (125 two-hop questions); ids are 0-based row indexes, the gold decomposition is in meta."""
    p = Path(path) if path is not None else require("bamboogle/bamboogle.json")

    def parse(rec: dict[str, Any], ctx: _Ctx) -> QARecord:
        ctx.rid = f"bamboogle:{ctx.index}"
        question = _require_text(rec, "Question", ctx)
        answer = _require(rec, "Answer", ctx, (str, int, float))
        decomposition = []
        for q_key, a_key in (("Q1", "A1"), ("Q2", "A2")):
            if rec.get(q_key) is not None:
                sub_q = _require_text(rec, q_key, ctx)
                sub_a = _str_list(rec.get(a_key, []), a_key, ctx)
                decomposition.append({"question": sub_q, "answers": sub_a})
        return QARecord(
            f"bamboogle:{ctx.index}",
            question,
            _dedupe([str(answer).strip()]),
            (),
            "bamboogle",
            {"decomposition": decomposition},
        )

    return _load_records(records_list(read_json(p), p), p, parse)


# ------------------------------------------------------------------------------------------------ Mintaka


def _scalar_text(value: Any) -> str:
    """A Mintaka answer value as text: bool → yes/no, integral float → int, else ``str``."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


MINTAKA_SPLITS = ("test", "dev", "train")


def load_mintaka_split(split: str = "test", path: PathLike | None = None) -> list[QARecord]:
    """A Mintaka split as released (``mintaka_{split}.json``, a JSON list: test 4,000, dev 2,000, train 14,000)."""
    if split not in MINTAKA_SPLITS:
        raise DataError(f"unknown Mintaka split {split!r}; valid: {', '.join(MINTAKA_SPLITS)}")
    return load_mintaka(Path(path) if path is not None else require(f"mintaka/mintaka_{split}.json"))


def load_mintaka(path: PathLike | None = None) -> list[QARecord]:
    """Mintaka records from a JSON list (the released files) or JSON lines (``.jsonl``); by default the 24-record
    dev excerpt (a derived file, on a mirror only).  Count questions are answered by ``answerNum``."""
    p = Path(path) if path is not None else require("mintaka/mintaka_dev_excerpt24.jsonl")

    def parse(rec: dict[str, Any], ctx: _Ctx) -> QARecord:
        rid = _require_id(rec, "id", ctx)
        question = _require_text(rec, "question", ctx)
        answer = _require(rec, "answer", ctx, dict)
        values = answer.get("answer")
        if values is not None and not isinstance(values, list):
            values = [values]
        labels, ids, entities = [], [], []
        for j, value in enumerate(values or []):
            if isinstance(value, dict):
                name, label = value.get("name"), value.get("label")
                if not isinstance(label, str) and not isinstance(name, str):
                    raise ctx.error(f"answer.answer[{j}] has neither 'label' nor 'name'")
                qid = name if isinstance(name, str) and _QID_RE.match(name) else None
                entities.append({"id": qid, "label": label})
                labels.append(label.strip() if isinstance(label, str) and label.strip() else str(name))
                if qid:
                    ids.append(qid)
            else:
                labels.append(_scalar_text(value))
        if not labels and isinstance(answer.get("mention"), str):
            labels.append(answer["mention"].strip())
        meta: dict[str, Any] = {
            "category": rec.get("category"),
            "complexityType": rec.get("complexityType"),
            "questionEntity": rec.get("questionEntity") or [],
            "answerType": answer.get("answerType"),
            "mention": answer.get("mention"),
        }
        if "answerNum" in answer:
            meta["answerNum"] = answer["answerNum"]
        if rec.get("complexityType") == "count" and isinstance(answer.get("answerNum"), (int, float)):
            meta["answer_entities"] = entities
            labels, ids = [_scalar_text(answer["answerNum"])], []
        return QARecord(f"mintaka:{rid}", question, _dedupe(labels), _dedupe(ids), "mintaka", meta)

    raw = read_jsonl(p) if p.suffix == ".jsonl" else records_list(read_json(p), p)
    return _load_records(raw, p, parse)


# ------------------------------------------------------------------------------------------------ HumanIQ


def load_humaniq_questions(name: str, path: PathLike | None = None) -> list[str]:
    """A HumanIQ evaluation question list (``humaniq/data/{name}.txt``): one question per line, blanks skipped."""
    if path is None:
        if name not in HUMANIQ_LISTS:
            raise DataError(f"unknown HumanIQ question list {name!r}; valid: {', '.join(HUMANIQ_LISTS)}")
        path = require(f"humaniq/data/{name}.txt")
    return [line.strip() for line in _read_text(path).splitlines() if line.strip()]


def question_key(text: str) -> str:
    """The one matching key for question texts (dataset joins, the leakage guards, DPP's own-question exclusion):
    lowercased, all whitespace removed, trailing ``?``/``.``/``!`` dropped.

    Removing (not just collapsing) whitespace also matches "movie F9?" with "movie F9 ?", which is how the
    HumanIQ list differs from CompMix in two questions.
    """
    return "".join(str(text).lower().split()).rstrip("?.!")


def load_humaniq_compmix(
    path: PathLike | None = None, questions_path: PathLike | None = None
) -> list[QARecord]:
    """CompMix test records whose question is in HumanIQ's ``compmix.txt`` (188 of its 199), in CompMix order.

    Eleven HumanIQ lines differ from CompMix by stray or doubled quote characters and are not matched.
    """
    wanted = {question_key(q) for q in load_humaniq_questions("compmix", questions_path)}
    return [r for r in load_compmix("test", path) if question_key(r.question) in wanted]


# ------------------------------------------------------------------------------------------------ specs


DATASET_SPECS: dict[str, Callable[[], list[QARecord]]] = {
    "compmix/test": lambda: load_compmix("test"),
    "compmix/dev": lambda: load_compmix("dev"),
    "compmix/train": lambda: load_compmix("train"),
    "qald10": load_qald10,
    "qald9plus": load_qald9plus,
    "bamboogle": load_bamboogle,
    "mintaka": load_mintaka,
    "mintaka/test": lambda: load_mintaka_split("test"),
    "mintaka/dev": lambda: load_mintaka_split("dev"),
    "mintaka/train": lambda: load_mintaka_split("train"),
    "qald9plus-wikidata": lambda: load_qald9plus_wikidata("test"),
    "qald9plus-wikidata/train": lambda: load_qald9plus_wikidata("train"),
    "compmix-release/test": lambda: load_compmix_release("test"),
    "compmix-release/dev": lambda: load_compmix_release("dev"),
    "compmix-release/train": lambda: load_compmix_release("train"),
    "humaniq-compmix": load_humaniq_compmix,
}


MODIFIERS = ("answerable",)

#: every evaluation set (all but the training split): ``--exclude eval`` keeps their questions out of compiled demos
EVAL_SETS = ("compmix/test", "compmix/dev", "humaniq-compmix", "qald10", "qald9plus", "bamboogle", "mintaka")
#: evaluation sets read from a derived file that only a mirror holds (spec → its dataset in the registry): on a machine
#: with neither the file nor a mirror they cannot be evaluated, so ``--exclude eval`` has nothing of theirs to keep out
MIRROR_ONLY_SETS = {"mintaka": "mintaka-excerpt"}


def load_dataset(spec: str, limit: int | None = None, pack_dir: PathLike | None = None) -> list[QARecord]:
    """Load a benchmark by spec (see :data:`DATASET_SPECS`), keeping the first ``limit`` records if given.

    A spec may end in modifiers, ``<name>:<modifier>``: ``:answerable`` keeps the questions whose gold answer is
    reachable in the knowledge pack at ``pack_dir`` (default: the configured pack; see
    :mod:`hqa.data.answerable`).  ``limit`` applies after the modifiers.
    """
    name, *mods = [part.strip() for part in spec.strip().split(":")]
    loader = DATASET_SPECS.get(name)
    if loader is None:
        raise DataError(f"unknown dataset {spec!r}; valid: {', '.join(DATASET_SPECS)} (optionally :answerable)")
    bad = [m for m in mods if m not in MODIFIERS]
    if bad:
        raise DataError(f"unknown dataset modifier {bad[0]!r} in {spec!r}; valid: {', '.join(MODIFIERS)}")
    if limit is not None and limit < 0:
        raise DataError(f"dataset limit must be >= 0, got {limit}")
    records = loader()
    if "answerable" in mods:
        from hqa.data.answerable import filter_answerable

        if pack_dir is None:
            from hqa.config import load_settings

            pack_dir = load_settings().pack_dir
        records = filter_answerable(records, Path(pack_dir), spec=name)
    return records if limit is None else records[:limit]


def load_examples(spec: str, limit: int | None = None) -> list:
    """The records of dataset ``spec`` (up to ``limit``) as DSPy examples with ``question`` as the input."""
    return [r.to_example() for r in load_dataset(spec, limit=limit)]
