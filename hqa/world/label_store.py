"""A world's label store (``labels.sqlite``): the writer the world builder fills.

Tables ``entities``, ``aliases``, ``names`` (every mention key the pack linker indexes,
:func:`hqa.retrievers.linking.entities.alias_keys`, with the prefixes the bounded fuzzy lookup uses), ``progress``
and ``meta`` (the build's checkpoint, committed in the same transaction as the rows it covers); the schema is
docs/worlds.md, "Label store and linker".  Read by :class:`hqa.retrievers.linking.label_store.LabelStoreLinker`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Iterable

from hqa.data.wikidata import norm_label
from hqa.retrievers.linking.entities import alias_keys, label_aliases
from hqa.retrievers.linking.label_store import STORE_FORMAT

SCHEMA = """
CREATE TABLE IF NOT EXISTS entities(id TEXT PRIMARY KEY, label TEXT, label_norm TEXT, description TEXT,
                                    degree INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS aliases(id TEXT NOT NULL, alias TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS names_raw(key TEXT NOT NULL, id TEXT NOT NULL, quality REAL NOT NULL);
CREATE TABLE IF NOT EXISTS progress(source INTEGER PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
"""


class LabelStoreWriter:
    """The label store under construction: rows are added per chunk, each chunk in one transaction together with the
    build's progress record, so a checkpoint never covers rows that were not committed (or the reverse).

    A chunk's mention keys are computed when it is committed (``names_raw``: every key a label or an alias gives,
    :func:`~hqa.retrievers.linking.entities.alias_keys` split per name — a label's keys at their quality, an alias's at
    0.95 — so the best quality per key and entity is what ``alias_keys`` gives the entity), while the engine loads the
    next chunk; :meth:`finish` only aggregates and indexes them, in one transaction."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.db = sqlite3.connect(str(self.path), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA cache_size=-262144")  # 256 MB of pages: the entity B-tree stays in memory
        self.db.execute("PRAGMA temp_store=MEMORY")  # GROUP BY and index sorts in memory, not temp files
        self.db.executescript(SCHEMA)

    def progress(self) -> dict[int, str]:
        return dict(self.db.execute("SELECT source, state FROM progress").fetchall())

    def commit_chunk(self, names: Iterable[tuple[str, str, str]], degree: Mapping[str, int] | Iterable[tuple[str, int]],
                     progress: tuple[int, str]) -> None:
        """Add one chunk's names, their mention keys and the degrees (a mapping or ``(id, degree)`` pairs), and record
        ``progress`` (source index, state JSON), atomically."""
        if isinstance(degree, Mapping):
            degree = degree.items()
        labels, descs, aliases, keys = [], [], [], []
        for eid, kind, text in names:
            if kind == "label":
                labels.append((eid, text, norm_label(text)))
                if eid[:1] == "Q":
                    keys.extend((key, eid, quality) for key, quality in label_aliases(text))
            elif kind == "description":
                descs.append((eid, text))
            else:
                aliases.append((eid, text))
                if eid[:1] == "Q":
                    keys.extend((key, eid, quality) for key, quality in alias_keys("", (text,)).items())
        for rows in (labels, descs, aliases):
            rows.sort()  # key order: B-tree pages are touched once, not at random
        db = self.db
        db.execute("BEGIN")
        try:
            db.executemany("INSERT INTO entities(id, label, label_norm) VALUES(?, ?, ?) ON CONFLICT(id) DO UPDATE "
                           "SET label = excluded.label, label_norm = excluded.label_norm", labels)
            db.executemany("INSERT INTO entities(id, description) VALUES(?, ?) ON CONFLICT(id) DO UPDATE "
                           "SET description = excluded.description", descs)
            db.executemany("INSERT INTO aliases(id, alias) VALUES(?, ?)", aliases)
            db.executemany("INSERT INTO names_raw(key, id, quality) VALUES(?, ?, ?)", keys)
            db.executemany("INSERT INTO entities(id, degree) VALUES(?, ?) ON CONFLICT(id) DO UPDATE "
                           "SET degree = degree + excluded.degree", degree)
            db.execute("INSERT OR REPLACE INTO progress(source, state) VALUES(?, ?)", progress)
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def finish(self, language: str) -> dict:
        """Aggregate the mention keys into ``names`` and build the indexes, in one transaction (an interrupted finish
        leaves the chunks' rows as they were); returns the manifest's ``labels`` counts."""
        db = self.db
        db.execute("BEGIN")
        try:
            db.execute("DROP TABLE IF EXISTS names")
            db.execute("DROP TABLE IF EXISTS names_fts")
            for sql in (
                "CREATE TABLE names(key TEXT NOT NULL, id TEXT NOT NULL, quality REAL NOT NULL, head TEXT NOT NULL,"
                " tail TEXT NOT NULL, len INTEGER NOT NULL)",
                "INSERT INTO names SELECT key, id, MAX(quality), substr(key, 1, 3),"
                " substr(key, 1, 1) || substr(key, -3, 3), length(key) FROM names_raw GROUP BY key, id",
                "DROP TABLE names_raw",
                "CREATE INDEX names_key ON names(key)",
                "CREATE INDEX names_head ON names(head, len)",
                "CREATE INDEX names_tail ON names(tail, len)",
                "CREATE VIRTUAL TABLE names_fts USING fts5(key, tokenize = 'unicode61 remove_diacritics 0')",
                "INSERT INTO names_fts(key) SELECT DISTINCT key FROM names",
                "CREATE INDEX IF NOT EXISTS entities_label ON entities(label_norm)",
                "CREATE INDEX IF NOT EXISTS aliases_id ON aliases(id)",
            ):
                db.execute(sql)
            max_words = db.execute(
                "SELECT MAX(length(key) - length(replace(key, ' ', '')) + 1) FROM names").fetchone()[0]
            counts = {
                "entities": db.execute("SELECT COUNT(*) FROM entities").fetchone()[0],
                "labelled": db.execute("SELECT COUNT(*) FROM entities WHERE label IS NOT NULL").fetchone()[0],
                "described": db.execute("SELECT COUNT(*) FROM entities WHERE description IS NOT NULL").fetchone()[0],
                "aliases": db.execute("SELECT COUNT(*) FROM aliases").fetchone()[0],
                "mention_keys": db.execute("SELECT COUNT(*) FROM names").fetchone()[0],
            }
            db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                           [("language", language), ("max_words", str(max_words or 1)), ("format", STORE_FORMAT)]
                           + [(k, str(v)) for k, v in counts.items()])
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise
        db.execute("PRAGMA journal_mode=DELETE")  # one self-contained file (no -wal beside it) for the world
        return {"format": "sqlite", "language": language, **counts}

    def close(self) -> None:
        self.db.close()


def _rollback(db) -> None:
    """Roll back the open transaction, if one is still open: an interrupt (Ctrl-C) can land after COMMIT or after
    SQLite itself ended the transaction, and a ROLLBACK then fails ("no transaction is active") and would replace
    the KeyboardInterrupt on its way out with an OperationalError."""
    import sqlite3

    if not db.in_transaction:
        return
    try:
        db.execute("ROLLBACK")
    except sqlite3.OperationalError:
        pass  # the original exception is what the caller must see


__all__ = ["LabelStoreWriter"]
