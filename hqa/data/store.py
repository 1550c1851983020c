"""The data directory: every benchmark and recording hqa reads, fetched from its public origin (or a mirror).

``hqa/data/registry.json`` lists each dataset: origin repository, pinned commit, file paths, license, and per file the
size, SHA-256 and git blob id where known.  Files keep their registry names in the data directory (:func:`data_dir`),
the same layout as a mirror (:func:`mirror`).  Downloads are pooch's, with :class:`Downloader` for what pooch does not
do: resume, a size bound on every file (its registered size, else ``data.max_file_mb``), one count of retries with a
capped ``Retry-After`` (:class:`Policy`), mirror folders read without following links out of them, and git blob ids.
A file without a registered SHA-256 has it recorded on first download (``checksums.json``), once it also parses as its
format.  Layout, origins and checks: docs/data.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urlparse

from hqa.errors import DataError

__all__ = ["DataFile", "Dataset", "Downloader", "Expected", "Policy", "data_dir", "data_path", "dataset", "datasets",
           "file_status", "mirror", "origin_url", "pull", "require", "require_dataset", "unparsable"]

MIRROR_ENV = "HQA_DATA_MIRROR"
#: the origin hosts, overridable for a proxy or a loopback test origin (same URL layout below the base)
ORIGIN_ENV = {"github": "HQA_DATA_ORIGIN_GITHUB", "huggingface": "HQA_DATA_ORIGIN_HUGGINGFACE"}
CHECKSUMS = "checksums.json"  # in the data directory: SHA-256 recorded on first download (files without one)
CHUNK = 1 << 13  # a dropped connection loses at most this much of a resumable download
_LOCAL_ONLY = contextvars.ContextVar("hqa_data_local_only", default=False)


class NotPulled(DataError):
    """A dataset that is not in the data directory, asked for inside :func:`local_only`."""


@contextlib.contextmanager
def local_only():
    """Within this block :func:`require` never fetches: a dataset not yet pulled raises :class:`NotPulled`."""
    token = _LOCAL_ONLY.set(True)
    try:
        yield
    finally:
        _LOCAL_ONLY.reset(token)


@dataclass(frozen=True)
class DataFile:
    file: str  # path in the data directory (= the mirror layout)
    path: str | None  # path in the origin repository (None: a derived file, on a mirror only)
    size: int | None
    sha256: str | None  # None: recorded on first download
    git_blob: str | None  # git's blob id of the file at the pinned commit (checks a file without a SHA-256)


@dataclass(frozen=True)
class Dataset:
    name: str
    what: str
    host: str | None  # "github" | "huggingface" | None (derived: no origin)
    repo: str
    commit: str
    license: str
    files: tuple[DataFile, ...]

    @property
    def origin(self) -> str:
        return f"{self.repo} @ {self.commit[:12]}" + ("" if self.host else " (derived, mirror only)")

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


@lru_cache(maxsize=1)
def _registry() -> dict[str, Any]:
    return json.loads(resources.files("hqa.data").joinpath("registry.json").read_text(encoding="utf-8"))


def datasets() -> dict[str, Dataset]:
    """Every dataset of the registry, by name, in registry order."""
    out = {}
    for d in _registry()["datasets"]:
        files = tuple(DataFile(**f) for f in d["files"])
        out[d["name"]] = Dataset(d["name"], d["what"], d["host"], d["repo"], d["commit"], d["license"], files)
    return out


def dataset(name: str) -> Dataset:
    found = datasets().get(name)
    if found is None:
        raise DataError(f"unknown dataset {name!r}; `hqa data list` shows the {len(datasets())} known ones")
    return found


def pack_inputs() -> list[str]:
    """The datasets the knowledge pack is built from (what ``make demo`` pulls)."""
    return list(_registry()["pack_inputs"])


def _owner(rel: str) -> tuple[Dataset, DataFile]:
    for d in datasets().values():
        for f in d.files:
            if f.file == rel:
                return d, f
    raise DataError(f"{rel} is not a file of any registered dataset (hqa/data/registry.json)")


# -- where -----------------------------------------------------------------------------------------------------------
def _settings():
    from hqa.config import load_settings

    return load_settings()


def data_dir(settings=None) -> Path:
    """``paths.data`` (``HQA_PATHS__DATA``), else ``<user cache>/hqa/data`` (``$HQA_CACHE_DIR/data``,
    ``$XDG_CACHE_HOME/hqa/data`` or ``~/.cache/hqa/data``): outside the checkout, shared by every checkout of a user."""
    from hqa.config import cache_root

    settings = settings or _settings()
    return Path(settings.paths.data).expanduser() if settings.paths.data else cache_root() / "data"


def mirror(settings=None) -> str | None:
    """The mirror: ``$HQA_DATA_MIRROR``, else ``paths.data_mirror``; a folder or an http(s) base URL (None: none)."""
    return os.environ.get(MIRROR_ENV) or (settings or _settings()).paths.data_mirror or None


def origin_url(ds: Dataset, f: DataFile) -> str | None:
    """The file's URL at its origin: raw.githubusercontent.com or a Hugging Face ``resolve`` URL, at the commit."""
    if ds.host is None or f.path is None:
        return None
    template = _registry()["origins"][ds.host]
    base = os.environ.get(ORIGIN_ENV[ds.host])
    url = template.format(repo=ds.repo, commit=ds.commit, path=f.path)
    if base:
        default = urlparse(template)
        url = base.rstrip("/") + url[len(f"{default.scheme}://{default.netloc}"):]
    return url


# -- checksums -------------------------------------------------------------------------------------------------------
def _hash_file(path: Path, algo: str) -> str:
    """SHA-256 of the file, or (``sha1``) its git blob id: sha1 of ``blob <size>\\0`` + content."""
    from hqa.io.files import file_digest

    return file_digest(path, algo, b"blob %d\0" % path.stat().st_size if algo == "sha1" else b"")


def _recorded(root: Path) -> dict[str, str]:
    try:
        return json.loads((root / CHECKSUMS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise DataError(f"{root / CHECKSUMS}: unreadable ({exc}); delete it to record the checksums again") from None


def _record(root: Path, rel: str, sha256: str) -> None:
    from hqa.io.files import write_atomic

    data = {**_recorded(root), rel: sha256}
    write_atomic(root / CHECKSUMS, json.dumps(dict(sorted(data.items())), indent=1) + "\n")


def _known_hash(root: Path, f: DataFile) -> str | None:
    return f.sha256 or _recorded(root).get(f.file)


def file_status(f: DataFile, root: Path, verify: bool = True) -> str:
    """``missing``, ``ok`` (SHA-256 as registered), ``ok (recorded)`` (as recorded on first download),
    ``unchecked`` (no SHA-256 yet), or ``WRONG`` (a file whose SHA-256 differs)."""
    path = root / f.file
    if not path.is_file():
        return "missing"
    known = _known_hash(root, f)
    if known is None:
        return "unchecked"
    if verify and _hash_file(path, "sha256") != known:
        return "WRONG"
    return "ok" if f.sha256 else "ok (recorded)"


# -- download --------------------------------------------------------------------------------------------------------
class SourceFailed(Exception):
    """One source (the mirror or the origin) did not give the file; the next source is tried.  ``unreachable``: it
    could not be reached or lacks the file, rather than giving a wrong one."""

    unreachable = False


class NotThere(SourceFailed):
    """The source does not have the file (HTTP 404/410, no such file in a mirror folder) or cannot be reached."""

    unreachable = True


class Refused(SourceFailed):
    """What the source gave is refused, and asking it again would not help: a body past the file's size bound, a
    ``Retry-After`` past ``http.retry_after_cap``, a mirror file that links out of its folder or fails its checks."""


class _Again(Exception):
    """One failed try worth another: HTTP 429 or 5xx, a connection refused, dropped or timed out, a body cut short or
    failing its checks.  ``retry_after`` as the server sent it; ``unreachable``: no answer came at all."""

    def __init__(self, message: str, retry_after: str | None = None, unreachable: bool = False) -> None:
        super().__init__(message)
        self.retry_after, self.unreachable = retry_after, unreachable


@dataclass(frozen=True)
class Expected:
    """What hqa knows of a file before it arrives: its registered ``size`` (None: unknown), the most bytes it may
    have (``limit``: that size, else ``data.max_file_mb``), the SHA-256 or git blob id it must have, and ``parse``:
    its format must parse (a file about to be pinned on first use, :func:`unparsable`)."""

    file: str
    size: int | None
    limit: int
    sha256: str | None = None
    git_blob: str | None = None
    parse: bool = False

    @property
    def bound(self) -> str:
        if self.size is not None:
            return f"its registered size of {self.size} bytes"
        return f"the {self.limit}-byte ceiling for a file of unknown size (data.max_file_mb)"

    def mismatch(self, path: Path) -> str | None:
        """Why the finished download ``path`` is not this file; None when it is."""
        got = path.stat().st_size
        if self.size is not None and got != self.size:
            return f"{got} bytes, not the registered {self.size}"
        if self.sha256 and _hash_file(path, "sha256") != self.sha256:
            return "SHA-256 of the download differs from the registry's (wrong or truncated file)"
        if self.git_blob and _hash_file(path, "sha1") != self.git_blob:
            return f"git blob id of the {got}-byte download differs from the origin's {self.git_blob}"
        return unparsable(path, Path(self.file).suffix) if self.parse else None


def unparsable(path: Path, suffix: str) -> str | None:
    """Why ``path`` does not parse as the format its name's ``suffix`` says: a ``.zip`` opens and its members' CRCs
    hold, a ``.json`` loads, every line of a ``.jsonl`` loads, a ``.csv`` or ``.txt`` is UTF-8 text.  None when it
    parses, or the suffix is none of these."""
    import zipfile

    suffix = suffix.lower()
    try:
        if suffix == ".zip":
            with zipfile.ZipFile(path) as zf:
                bad = zf.testzip()
            return f"member {bad} of the zip is damaged" if bad else None
        if suffix not in (".json", ".jsonl", ".csv", ".txt"):
            return None
        text = path.read_text(encoding="utf-8")
        if suffix == ".json":
            json.loads(text)
        elif suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
    except zipfile.BadZipFile:
        return "not a readable zip file"
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except (ValueError, RecursionError) as exc:
        return f"not valid {suffix[1:].upper()} ({' '.join(str(exc).split())[:120]})"
    return None


@dataclass(frozen=True)
class Policy:
    """How one source is asked for one file: ``attempts`` tries in all (``http.max_retries`` + 1; pooch's own retries
    are off, so the count is not multiplied), each request's ``timeout``, the waits between tries
    (:class:`hqa.io.waits.Backoff`: the server's ``Retry-After``, else jittered exponential backoff), and
    ``retry_after_cap``: a longer ``Retry-After`` gives up on the source at once (``http.retry_after_cap``)."""

    attempts: int
    timeout: float
    user_agent: str
    backoff: Any
    retry_after_cap: float

    @classmethod
    def of(cls, settings) -> "Policy":
        from hqa.io.waits import Backoff

        http = settings.http
        return cls(http.max_retries + 1, max(http.timeout, 30.0), http.user_agent,
                   Backoff(http.backoff_base, http.backoff_cap), http.retry_after_cap)


def _pause(seconds: float) -> None:
    """The wait between two tries of a download (cut short by a cancelled request; tests observe it)."""
    from hqa.io import cancel

    cancel.sleep(seconds)


class Downloader:
    """A pooch downloader (``downloader(url, output_file, pooch)``) that keeps to what hqa knows of the file
    (:class:`Expected`) and asks its source as :class:`Policy` says.

    HTTP(S) bodies go to ``part`` (``<target>.part``), continued by a ``Range`` request on the next try, or the next
    pull after an interrupt.  A body past ``expected.limit`` (declared or received) is refused the moment it is, and
    its part removed.  A local path (a mirror folder, ``within``) is copied once, never through a link that leaves the
    folder.  The finished file, checked, replaces pooch's ``output_file``.
    """

    def __init__(self, part: Path, expected: Expected, policy: Policy, progress: bool = False,
                 within: Path | None = None) -> None:
        self.part, self.expected, self.policy, self.progress = Path(part), expected, policy, progress
        self.within = within

    def __call__(self, url: str, output_file: str, pooch_obj: Any = None, check_only: bool = False) -> None:
        if urlparse(url).scheme in ("http", "https"):
            self._retrying(url)
        else:
            self._copy(Path(url))
        os.replace(self.part, output_file)

    # -- a mirror folder -------------------------------------------------------------------------------------------
    def _copy(self, src: Path) -> None:
        if not src.is_file():
            raise NotThere("no such file")
        real = src.resolve()
        if self.within is not None and not real.is_relative_to(self.within.resolve()):
            raise Refused(f"refused: a link to {real}, outside the mirror folder (not followed)")
        limit = self.expected.limit
        with open(real, "rb") as fin, open(self.part, "wb") as fout:
            copied = _write_within(iter(lambda: fin.read(1 << 20), b""), fout, 0, limit)
        if copied > limit:
            self.part.unlink()
            raise Refused(f"refused: larger than {self.expected.bound}")
        why = self.expected.mismatch(self.part)
        if why:
            self.part.unlink()
            raise Refused(f"refused: {why}")

    # -- HTTP ------------------------------------------------------------------------------------------------------
    def _retrying(self, url: str) -> None:
        import tenacity

        attempts = self.policy.attempts
        try:
            tenacity.Retrying(retry=tenacity.retry_if_exception_type(_Again), wait=self._wait,
                              stop=tenacity.stop_after_attempt(attempts), sleep=lambda s: _pause(s))(self._try, url)
        except tenacity.RetryError as exc:
            last = exc.last_attempt.exception()
            gave_up = f"{last}; gave up after {attempts} attempt{'s' if attempts > 1 else ''}"
            raise (NotThere if getattr(last, "unreachable", False) else SourceFailed)(gave_up) from None

    def _wait(self, state) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self.policy.backoff.seconds(state.attempt_number - 1, getattr(exc, "retry_after", None))

    def _session(self):
        import requests

        session = requests.Session()  # no adapter retries: the one count of attempts is _retrying's
        session.headers["User-Agent"] = self.policy.user_agent
        return session

    def _try(self, url: str) -> None:
        import requests

        start = self.part.stat().st_size if self.part.exists() else 0
        if start > self.expected.limit:  # a part left by an earlier pull that is already too large
            self.part.unlink()
            start = 0
        headers = {"Range": f"bytes={start}-"} if start else {}
        with self._session() as session:
            try:
                r = session.get(url, stream=True, timeout=self.policy.timeout, headers=headers)
            except (requests.ConnectionError, requests.Timeout) as exc:
                raise _Again(f"unreachable ({type(exc).__name__})", unreachable=True) from None
            with r:
                self._status(r)
                self._body(url, r, start)
        why = self.expected.mismatch(self.part)
        if why:
            self.part.unlink()
            raise _Again(why)

    def _status(self, r) -> None:
        """Raise for a reply that carries no file: 404/410 (not there), 429/5xx (again, after the wait it asks for,
        unless that is past the cap), any other error status."""
        code = r.status_code
        if code in (404, 410):
            raise NotThere(f"HTTP {code}")
        if code == 416:  # the part is not a prefix of this file: start over
            self.part.unlink(missing_ok=True)
            raise _Again("HTTP 416 for a resumed download")
        if code == 429 or code >= 500:
            from hqa.io.waits import too_long

            cap = self.policy.retry_after_cap
            wait = too_long(r.headers.get("Retry-After"), cap)
            if wait is not None:
                raise Refused(f"refused: HTTP {code} asking to wait {wait:.0f}s (Retry-After), beyond the {cap:g}s "
                              "cap (http.retry_after_cap)")
            raise _Again(f"HTTP {code}", r.headers.get("Retry-After"))
        if code >= 400:
            raise SourceFailed(f"HTTP {code}")

    def _body(self, url: str, r, start: int) -> None:
        """Append the response body to the part file (from ``start`` on a 206), with a progress bar; refused the
        moment it would pass ``expected.limit``."""
        import requests

        if start and r.status_code != 206:
            start = 0  # the server sent the whole file
        length = r.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else None
        limit = self.expected.limit
        if total is not None and total > limit:
            self.part.unlink(missing_ok=True)
            raise Refused(f"refused: the reply declares {total} bytes, past {self.expected.bound}")
        from tqdm import tqdm

        try:
            with open(self.part, "ab" if start else "wb") as fh, tqdm(
                    total=total, initial=start, unit="B", unit_scale=True, leave=False, file=sys.stderr,
                    desc=Path(urlparse(url).path).name, disable=not self.progress) as bar:
                written = _write_within(r.iter_content(CHUNK), fh, start, limit, bar.update)
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
            got = self.part.stat().st_size if self.part.exists() else 0
            raise _Again(f"connection lost after {got} bytes ({type(exc).__name__})") from None
        if written > limit:
            self.part.unlink()
            raise Refused(f"refused: the body goes past {self.expected.bound} (the partial download is removed)")


def _write_within(chunks: Iterable[bytes], fh, written: int, limit: int,
                  wrote: Callable[[int], Any] | None = None) -> int:
    """Write ``chunks`` to ``fh`` while the file (``written`` bytes so far) stays within ``limit``; the count
    reached, past ``limit`` when the source had more (the chunk that passed it is not written)."""
    for chunk in chunks:
        written += len(chunk)
        if written > limit:
            break
        fh.write(chunk)
        if wrote is not None:
            wrote(len(chunk))
    return written


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _sources(ds: Dataset, f: DataFile, base: str | None) -> list[tuple[str, str, Path | None]]:
    """(kind, URL or path, the mirror folder a path must stay within) of each source of ``f``, mirror first."""
    out: list[tuple[str, str, Path | None]] = []
    if base and urlparse(base).scheme in ("http", "https"):
        out.append(("mirror", base.rstrip("/") + "/" + f.file, None))
    elif base:
        folder = Path(base.removeprefix("file://")).expanduser()
        out.append(("mirror", str(folder / f.file), folder))
    url = origin_url(ds, f)
    return out + ([("origin", url, None)] if url else [])


def _fetch(ds: Dataset, f: DataFile, root: Path, base: str | None, progress: bool, settings) -> str:
    """Bring one file into ``root`` (mirror first, then origin); returns where it came from.  The old file stays
    unless the new one passed its checks.  One pull at a time writes the file's ``.part``: the lock beside it,
    ``<file>.part.lock`` (filelock's ``SoftFileLock``: the holder's pid in it), is removed when the pull ends, and
    one left by a killed pull is taken over."""
    import pooch
    from filelock import SoftFileLock

    pooch.get_logger().setLevel("WARNING")
    target = root / f.file
    target.parent.mkdir(parents=True, exist_ok=True)
    sources = _sources(ds, f, base)
    policy = Policy.of(settings)
    failures: list[str] = []
    unreachable = False
    part = Path(str(target) + ".part")
    with _pull_lock(SoftFileLock(str(part) + ".lock")):
        for kind, url, within in sources:
            known = _known_hash(root, f)
            if target.is_file() and known and _hash_file(target, "sha256") == known:
                return "present"
            limit = f.size if f.size is not None else settings.data.max_file_mb * 1_000_000
            expected = Expected(f.file, f.size, limit, sha256=known, git_blob=None if known else f.git_blob,
                                parse=known is None)
            puppy = pooch.create(path=root, base_url="", registry={f.file: known}, urls={f.file: url},
                                 retry_if_failed=0)
            down = Downloader(part, expected, policy, progress=progress, within=within)
            try:
                if target.is_file() and not known:  # a file without any checksum yet is replaced only by a good one
                    tmp = target.with_name(target.name + ".old")
                    os.replace(target, tmp)
                    try:
                        puppy.fetch(f.file, downloader=down)
                    except BaseException:
                        os.replace(tmp, target)
                        raise
                    tmp.unlink()
                else:
                    puppy.fetch(f.file, downloader=down)
            except SourceFailed as exc:
                failures.append(f"{kind} {url}: {exc}")
                unreachable = exc.unreachable
                continue
            except Exception as exc:  # noqa: BLE001 - pooch's checksum, OS errors: the next source, then one line
                failures.append(f"{kind} {url}: {_short(exc)}")
                unreachable = False
                continue
            if known is None:
                _record(root, f.file, _hash_file(target, "sha256"))
            return kind
    kept = " (the previous copy is kept)" if target.is_file() else ""
    if not sources:
        raise DataError(f"dataset {ds.name}: {f.file} is derived and has no public origin; it comes only from a "
                        f"mirror: set {MIRROR_ENV} (or paths.data_mirror) to a folder holding it, or use the released "
                        f"files it was derived from ({ds.repo} @ {ds.commit[:12]}; hqa data list)")
    if unreachable:  # the origin could not be reached or lacks the file, and no mirror had it
        where = f"{f.file} in {root} is outdated" if target.is_file() else f"dataset {ds.name} is not in {root}"
        tried = "; ".join(failures)
        raise DataError(f"{where} and could not be fetched ({tried}): run `hqa data pull {ds.name}` on a machine "
                        f"with internet, or set {MIRROR_ENV} (or paths.data_mirror) to a folder or URL holding its "
                        f"files in the data directory's layout ({f.file}){kept}")
    raise DataError(f"dataset {ds.name}: {f.file} could not be fetched — " + "; ".join(failures) + kept)


@contextlib.contextmanager
def _pull_lock(lock, patience: float = 10.0):
    """Hold ``lock``, waiting as long as another pull holds it, and saying so once after ``patience`` seconds."""
    from filelock import Timeout

    try:
        lock.acquire(timeout=patience)
    except Timeout:
        holder = f"pid {lock.pid}" if lock.pid else "a holder that recorded no pid: remove the file if no pull runs"
        _say(f"hqa: waiting for another pull of the same file ({lock.lock_file}, {holder})")
        lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if "hash of downloaded file" in text.lower():
        text = "SHA-256 of the download differs from the registry's (wrong or truncated file)"
    return f"{type(exc).__name__}: {text[:300]}"


def pull(names: Iterable[str], progress: bool = True, settings=None,
         report: Callable[[str], None] = _say) -> dict[str, str]:
    """Fetch every file of the named datasets that is missing or fails its checksum; ``{file: where from}``
    (``present``, ``mirror`` or ``origin``).  The first failure raises :class:`DataError` (one line)."""
    settings = settings or _settings()
    root, base = data_dir(settings), mirror(settings)
    out = {}
    for name in names:
        ds = dataset(name)
        for f in ds.files:
            out[f.file] = _fetch(ds, f, root, base, progress, settings)
        fetched = [f.file for f in ds.files if out[f.file] != "present"]
        if fetched:
            report(f"{ds.name}: {len(fetched)} file(s) from {out[fetched[0]]} "
                   f"({ds.origin if out[fetched[0]] == 'origin' else base}) into {root}")
    return out


def require_dataset(name: str, settings=None) -> Path:
    """The data directory with every file of dataset ``name`` in it, fetching the missing ones first (one line on
    stderr says what is fetched)."""
    settings = settings or _settings()
    root = data_dir(settings)
    ds = dataset(name)
    if all((root / f.file).is_file() for f in ds.files):
        return root
    if _LOCAL_ONLY.get():
        raise NotPulled(f"dataset {ds.name} is not pulled into {root} (hqa data pull {ds.name})")
    size = f", {ds.size / 1e6:.1f} MB" if ds.size else ""
    where = mirror(settings) or ds.origin
    _say(f"fetching dataset {ds.name} ({ds.license}{size}) from {where} into {root} (first use)")
    pull([name], progress=sys.stderr.isatty(), settings=settings, report=lambda _m: None)
    return root


def data_path(arg: str, settings=None) -> Path:
    """A command-line file argument: the path itself when it exists, else — when it names a registry file such as
    ``humaniq/long_data/…json`` — that file in the data directory, fetched on first use."""
    if Path(arg).exists() or not any(f.file == arg for d in datasets().values() for f in d.files):
        return Path(arg)
    return require(arg, settings)


def obtainable(name: str, settings=None) -> bool:
    """Whether dataset ``name`` is here or can be fetched: every file in the data directory, or a mirror set, or a
    public origin (a derived file has none: it comes from a mirror only)."""
    settings = settings or _settings()
    ds, root = dataset(name), data_dir(settings)
    return all((root / f.file).is_file() for f in ds.files) or mirror(settings) is not None or ds.host is not None


def require(rel: str, settings=None) -> Path:
    """The path of data file ``rel`` (a registry file name such as ``compmix/test_set.json``), fetching its dataset
    on first use."""
    return require_dataset(_owner(rel)[0].name, settings) / rel
