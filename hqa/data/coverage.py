"""How much of each benchmark the knowledge pack covers, measured from the pack and the benchmark files."""

from __future__ import annotations

from pathlib import Path

from hqa.data.jsonl import read_jsonl


def coverage(pack_dir: Path, specs: tuple[str, ...] = ("compmix/test", "compmix/dev", "compmix/train", "qald10",
                                                      "mintaka")) -> dict[str, dict[str, float | int]]:
    """Per benchmark: questions, how many have >=1 gold question entity in the pack (labelled), and how many have
    >=1 gold answer QID in the pack.  A benchmark not pulled into the data directory is not fetched for this: its
    entry is ``{"not_pulled": "<one line>"}``."""
    from hqa.data.datasets import load_dataset
    from hqa.data.store import NotPulled, local_only

    labelled = {e["id"] for e in read_jsonl(Path(pack_dir) / "entities.jsonl") if e.get("label")}
    out: dict[str, dict[str, float | int]] = {}
    for spec in specs:
        try:
            with local_only():
                records = load_dataset(spec)
        except NotPulled as exc:
            out[spec] = {"not_pulled": str(exc)}
            continue
        with_entities = [r for r in records if r.question_entities()]
        ent_hit = sum(1 for r in with_entities if labelled.intersection(r.question_entities()))
        ans_hit = sum(1 for r in records if set(r.answer_ids) & labelled)
        out[spec] = {
            "questions": len(records),
            "questions_with_gold_entities": len(with_entities),
            "question_entity_covered": ent_hit,
            "answer_entity_covered": ans_hit,
        }
    return out
