"""The HumanIQ authors' own GPT-4 runs, imported as hqa run folders (``hqa report import``; docs/reproduction.md).

The HumanIQ repository keeps two kinds of model output (datasets ``humaniq-runs`` and ``humaniq-late-fusion`` of
:mod:`hqa.data.store`):

* ``long_data/*.json`` — HQA-GPT-4's per-question outputs ``{question, internal_knowledge, wikipedia_answer,
  wikidata_answer, assistant_response, long_answer}`` for CompMix (one run of 200) and Mintaka (12 runs, some on other
  question samples), plus two small ``*_replaced_longanswer_gpt4.json`` files with regenerated long answers for a
  few questions.  A record may be ``{}``: the run wrote nothing for that question;
* ``late_fusion/*_wikidata.json`` — the Wikidata-only pipeline of the late-fusion baseline (HumanIQ RQ4),
  ``{question, wikidata_answer, error, intermediate_logs}``; its logs end with the parametric answer
  ("Internal Knowledge: …").

:func:`import_run` writes them as ``predictions.jsonl`` rows (:func:`hqa.schemas.records.check_row`), matched to gold
by their text (:func:`loose_key`): CompMix against every CompMix split, QALD against QALD-9-plus test on DBpedia,
Mintaka against the 24-record dev excerpt (so no Mintaka question matches).  An unmatched question is kept with
``trace.gold_matched = false`` and left out of every score; ``import.json`` beside the rows says what was imported
and why the numbers differ from the paper's (:func:`_notes`).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from hqa.config import write_atomic
from hqa.data.datasets import QARecord, load_compmix, load_mintaka, load_qald9plus
from hqa.data.store import require
from hqa.data.traces import parse_trace
from hqa.errors import DataError, question_too_long
from hqa.schemas.records import check_row
from hqa.scoring.answers import answer_or_none
from hqa.scoring.metrics import score_all
from hqa.schemas.run_folder import RunFolder

__all__ = ["BENCHMARKS", "benchmark_of_file", "gold_index", "import_run", "loose_key", "rows_from_late_fusion",
           "rows_from_long_data"]

BENCHMARKS = ("compmix", "mintaka", "qald")
PROGRAM = "humaniq-gpt4-authors"
ALIGNED = 0.9  # share of a file's questions that must sit at their HumanIQ list position to place empty records
_LIST_OF = {"compmix": "compmix", "mintaka": "mintaka", "qald": "qald_full"}
#: the largest file imported (bytes): the largest of the authors' files is 0.52 MB (a value chosen here)
MAX_FILE_BYTES = 64 << 20
#: the text fields of each kind of file (each a string or null in every record of the authors' files)
LONG_DATA_FIELDS = ("question", "internal_knowledge", "wikipedia_answer", "wikidata_answer", "assistant_response",
                    "long_answer")
LATE_FUSION_FIELDS = ("question", "wikidata_answer", "error", "intermediate_logs")


def loose_key(text: str) -> str:
    """Question text reduced to lowercase letters and digits: the authors' files carry stray or doubled quote
    characters ("Who directed ""Harder to Breathe""?") that the benchmarks do not."""
    return re.sub(r"[^0-9a-z]", "", str(text).lower())


def benchmark_of_file(path: Path) -> str:
    """The benchmark a file of the authors' runs belongs to, from its name (``…compmix…``, ``…mintaka…``,
    ``…qald…``)."""
    name = Path(path).name.lower()
    found = [b for b in BENCHMARKS if b in name]
    if len(found) != 1:
        raise DataError(f"cannot tell the benchmark of {path} from its name; pass --dataset compmix|mintaka|qald")
    return found[0]


def gold_index(benchmark: str) -> dict[str, QARecord]:
    """Gold records of ``benchmark`` by :func:`loose_key` of their question (first occurrence wins: CompMix test
    before dev and train)."""
    if benchmark == "compmix":
        records = [r for split in ("test", "dev", "train") for r in load_compmix(split)]
    elif benchmark == "qald":
        records = load_qald9plus()
    elif benchmark == "mintaka":
        records = load_mintaka()
    else:
        raise DataError(f"unknown benchmark {benchmark!r}; valid: {', '.join(BENCHMARKS)}")
    out: dict[str, QARecord] = {}
    for r in records:
        out.setdefault(loose_key(r.question), r)
    return out


def _row(benchmark: str, index: int, question: str, gold: QARecord | None, answer: str, trace: dict[str, Any],
         error: str | None, source: str, tool_calls: int = 0) -> dict[str, Any]:
    trace = {"program": PROGRAM, "question": question, **trace, "gold_matched": gold is not None,
             "source_file": source, "source_index": index}
    golds = list(gold.answers) if gold else []
    ids = list(gold.answer_ids) if gold else []
    row = {"id": gold.id if gold else f"{benchmark}-unmatched:{index}", "question": question, "gold": golds,
           "gold_ids": ids, "dataset": benchmark, "gold_entities": gold.question_entities() if gold else [],
           "decomposition": None, "answer": answer, "trace": trace, "error": error, "tool_calls": tool_calls,
           "scores": score_all(answer, golds, ids)}
    return check_row(row, f"{source} record {index}")


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not a JSON value")


def _read_list(path: Path, fields: tuple[str, ...]) -> list:
    """The records of an authors' file, refused in one line unless it is strict JSON (no ``NaN``), at most
    :data:`MAX_FILE_BYTES`, a list, and each record's ``fields`` are text or null, its question within the question
    limit of every other entry (:data:`hqa.errors.MAX_QUESTION_CHARS`)."""
    try:
        if Path(path).stat().st_size > MAX_FILE_BYTES:
            raise DataError(f"{path} is larger than {MAX_FILE_BYTES} bytes: not one of the authors' files")
        data = json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=_not_json)
    except FileNotFoundError:
        raise DataError(f"no such file: {path}") from None
    except RecursionError:
        raise DataError(f"{path} is nested too deeply: the authors' files are lists of flat records") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path} is not a readable JSON file: {exc}") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records, found {type(data).__name__}")
    for i, rec in enumerate(data):
        for key in fields if isinstance(rec, dict) else ():
            if rec.get(key) is not None and not isinstance(rec[key], str):
                raise DataError(f"{path} record {i}: {key!r} must be text or null, found {type(rec[key]).__name__}")
        too_long = question_too_long(rec.get("question") or "") if isinstance(rec, dict) else None
        if too_long:
            raise DataError(f"{path} record {i}: {too_long}")
    return data


def _question_list(benchmark: str) -> list[str]:
    """HumanIQ's question list of ``benchmark`` with blank lines kept (a run's record i may sit at line i + 1)."""
    try:
        path = require(f"humaniq/data/{_LIST_OF[benchmark]}.txt")
        return [q.strip() for q in path.read_text(encoding="utf-8").split("\n")]
    except OSError:
        return []


def _positions(records: list, lines: list[str]) -> list[int | None]:
    """The HumanIQ list position of each record: where its question stands in the list, else — when the file
    follows the list (at least :data:`ALIGNED` of its questions sit at their index, or the index + 1) — its index
    there, which places an empty record and a record whose question the authors later replaced (the CompMix run
    has 4, answered again in ``compmix_replaced_longanswer_gpt4.json``); else None."""
    where = {loose_key(q): i for i, q in reversed(list(enumerate(lines))) if q}
    found = [where.get(loose_key(r.get("question") or "")) if isinstance(r, dict) else None for r in records]
    asked = [i for i, r in enumerate(records) if isinstance(r, dict) and r.get("question")]
    for offset in (0, 1):
        same = sum(1 for i in asked if found[i] == i + offset)
        if asked and same >= ALIGNED * len(asked):
            return [f if f is not None else (i + offset if i + offset < len(lines) else None)
                    for i, f in enumerate(found)]
    return found


def rows_from_long_data(path: Path, benchmark: str, gold: dict[str, QARecord],
                        skip_empty: bool = False) -> tuple[list[dict], dict[str, int]]:
    """Rows of one ``long_data`` file: per-source answers (Wikipedia → text, Wikidata → kg, internal knowledge →
    parametric), the assistant response, and the long answer as the final answer.  An empty record becomes an
    error row when its question can be recovered from the HumanIQ list (``skip_empty`` drops it)."""
    records = _read_list(path, LONG_DATA_FIELDS)
    lines = _question_list(benchmark)
    positions = _positions(records, lines)
    rows, counts = [], {"records": len(records), "empty": 0, "empty_unrecoverable": 0}
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise DataError(f"{path} record {i}: expected a JSON object, found {type(rec).__name__}")
        question = str(rec.get("question") or "").strip()
        if not question:
            counts["empty"] += 1
            question = lines[positions[i]] if positions[i] is not None else ""
            if skip_empty or not question:
                counts["empty_unrecoverable"] += 0 if skip_empty else 1
                continue
            rows.append(_row(benchmark, i, question, gold.get(loose_key(question)), "",
                             {"answers": {"text": None, "kg": None, "parametric": None, "final": None},
                              "list_position": positions[i]},
                             "the authors' run recorded no output for this question", path.name))
            continue
        final = answer_or_none(rec.get("long_answer")) or ""
        answers = {"text": answer_or_none(rec.get("wikipedia_answer")),
                   "kg": answer_or_none(rec.get("wikidata_answer")),
                   "parametric": answer_or_none(rec.get("internal_knowledge")), "final": final or None}
        trace = {"answers": answers, "assistant_response": rec.get("assistant_response"),
                 "list_position": positions[i]}
        rows.append(_row(benchmark, i, question, gold.get(loose_key(question)), final, trace, None, path.name))
    return rows, counts


def _sparql_of(step) -> dict[str, Any]:
    """A RunSparql step of a late-fusion log as a trace SPARQL record: rows when the observation is a result list,
    else the observation as the error (the tool answers "The given query failed …" on a failed query)."""
    try:
        obs = ast.literal_eval(step.observation.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        obs = None
    message = obs.get("message") if isinstance(obs, dict) else None
    if isinstance(message, list):
        return {"query": step.action_input, "rows": [m for m in message if isinstance(m, dict)], "error": None}
    if isinstance(message, bool):
        return {"query": step.action_input, "rows": [], "boolean": message, "error": None}
    return {"query": step.action_input, "rows": [], "error": str(message if message is not None
                                                                 else step.observation)[:300] or "no result"}


def rows_from_late_fusion(path: Path, benchmark: str, gold: dict[str, QARecord]) -> tuple[list[dict], dict[str, int]]:
    """Rows of one ``late_fusion/*_wikidata.json`` file: the structured pipeline's answer is the kg answer and the
    row's answer; the parametric answer appended to the log is kept; the log's steps become the trace's steps, tool
    calls and SPARQL records."""
    records = _read_list(path, LATE_FUSION_FIELDS)
    rows, counts = [], {"records": len(records), "errors": 0}
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or not str(rec.get("question") or "").strip():
            raise DataError(f"{path} record {i}: expected an object with a question")
        question = str(rec["question"]).strip()
        logs = rec.get("intermediate_logs")
        parsed = parse_trace(logs, question=question) if isinstance(logs, str) and logs.strip() else None
        error = str(rec["error"])[:500] if rec.get("error") else None
        counts["errors"] += bool(error)
        kg = answer_or_none(parsed.wikidata_answer) if parsed else None
        if kg is None and parsed is None and isinstance(rec.get("wikidata_answer"), str):
            kg = answer_or_none(parse_trace(rec["wikidata_answer"], question=question).wikidata_answer)
        steps = parsed.steps if parsed else []
        trace = {
            "answers": {"text": None, "kg": kg, "final": kg,
                        "parametric": answer_or_none(parsed.internal_knowledge) if parsed else None},
            "steps": [{"step": j, "thought": s.thought, "tool": s.action, "input": s.action_input,
                       "observation": s.observation[:500]} for j, s in enumerate(steps)],
            "tool_calls": [{"tool": s.action, "input": s.action_input, "output": s.observation[:500]}
                           for s in steps if s.action],
            "sparql": [_sparql_of(s) for s in steps if s.action == "RunSparql"],
            "assistant_response": parsed.response if parsed else None,
            "merged": False,  # the structured half alone: its answer went through no final response generation
        }
        rows.append(_row(benchmark, i, question, gold.get(loose_key(question)), kg or "", trace, error, path.name,
                         tool_calls=sum(1 for s in steps if s.action)))
    return rows, counts


def _notes(kind: str, benchmark: str, rows: list[dict], counts: dict[str, int], files: list[Path]) -> list[str]:
    matched = sum(1 for r in rows if r["trace"]["gold_matched"])
    notes = [f"{len(rows)} questions from {', '.join(f.name for f in files)} ({kind}, {benchmark}); "
             f"{matched} matched to gold by question text, {len(rows) - matched} unmatched (left out of the scores)."]
    if kind == "long_data":
        notes.append(f"{counts.get('empty', 0)} records are empty in the authors' file (the run wrote nothing): "
                     + ("left out (--skip-empty)." if counts.get("skipped_empty") else
                        "kept as error rows with no source answer where the HumanIQ question list gives their "
                        f"question ({counts.get('empty_unrecoverable', 0)} could not be placed and are left out)."))
        notes.append("The final answer here is the long answer (the paper's human-evaluation response), not the short "
                     "response the paper scored for Tables 1-3: EM and Hits@1 of a sentence are near zero by "
                     "construction; recall (a gold answer occurs in it) is the automatic stand-in.")
    else:
        notes.append("The Wikidata-only late-fusion pipeline: the row's answer is its Wikidata answer; text has no "
                     "answer here (the Wikipedia half's outputs are not in the authors' repository).")
    notes.append("correct = a gold label occurs in the answer (normalised, whole tokens) or a gold QID is named; "
                 "the paper judged every non-exact answer by hand, fixed wrong gold answers and skipped nonsensical "
                 "questions, so its prec is higher where an answer is right in other words (dates, aliases, lists).")
    if benchmark == "mintaka":
        notes.append("Mintaka gold here is the 24-record dev excerpt, not the test set (dataset mintaka/test): "
                     "the questions cannot be matched to gold.")
    if benchmark == "qald":
        notes.append("QALD gold is QALD-9-plus test on DBpedia (the Wikidata version, dataset qald9plus-wikidata/test, is "
                     "not used by this import yet): "
                     "answers are DBpedia page names, not Wikidata labels or QIDs.")
    return notes


def import_run(files: list[Path], out_dir: Path, benchmark: str | None = None, skip_empty: bool = False,
               overwrite: bool = False) -> dict[str, Any]:
    """Import the authors' output ``files`` (all ``long_data`` or all ``late_fusion``, one benchmark) into
    ``out_dir/predictions.jsonl`` and ``out_dir/import.json``; a later file's record replaces an earlier one with
    the same question or HumanIQ list position (the ``*_replaced_longanswer_gpt4.json`` files).  Refuses to
    overwrite an existing predictions file unless ``overwrite``."""
    files = [Path(f) for f in files]
    if not files:
        raise DataError("no files to import")
    kinds = {"late_fusion" if "late_fusion" in f.name or f.parent.name == "late_fusion" else "long_data" for f in files}
    if len(kinds) != 1:
        raise DataError("import long_data files and late_fusion files into separate runs")
    kind = kinds.pop()
    benches = {benchmark} if benchmark else {benchmark_of_file(f) for f in files}
    if len(benches) != 1:
        raise DataError(f"files of several benchmarks ({', '.join(sorted(benches))}): import them separately")
    bench = benches.pop()
    out_dir = Path(out_dir)
    folder = RunFolder(out_dir)
    target = folder.rows_path
    if target.exists() and not overwrite:
        raise DataError(f"{target} exists; pass --fresh to replace it, or --out another folder")
    gold = gold_index(bench)
    by_question: dict[str, dict] = {}
    counts: dict[str, int] = {}
    for f in files:
        rows, c = (rows_from_late_fusion(f, bench, gold) if kind == "late_fusion"
                   else rows_from_long_data(f, bench, gold, skip_empty=skip_empty))
        for k, v in c.items():
            counts[k] = counts.get(k, 0) + v
        for r in rows:  # a later file's answer to the same question, or at the same list position, replaces it
            pos = r["trace"].get("list_position")
            by_question[f"@{pos}" if pos is not None else loose_key(r["question"])] = r
    counts["skipped_empty"] = int(skip_empty)
    rows = list(by_question.values())
    seen: dict[str, int] = {}
    for r in rows:  # two questions matched to one gold record (a near-duplicate): keep ids unique
        n = seen.get(r["id"], 0)
        seen[r["id"]] = n + 1
        if n:
            r["id"] = f"{r['id']}#{n}"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(target, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    info = {"kind": kind, "benchmark": bench, "files": [str(f) for f in files], "counts": counts,
            "notes": _notes(kind, bench, rows, counts, files)}
    write_atomic(folder.import_info, json.dumps(info, indent=2) + "\n")
    return info
