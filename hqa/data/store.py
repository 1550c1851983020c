"""The data directory: every benchmark and recording hqa reads, fetched from its public origin (or a mirror).

``hqa/data/registry.json`` lists each dataset: origin repository, pinned commit, file paths, license, and per file the
size, SHA-256 and git blob id where known.  Files keep their registry names in the data directory (:func:`data_dir`),
the same layout as a mirror (:func:`mirror`).  Downloads are pooch's, with :class:`Downloader` for what pooch does not
do (resume, ``Retry-After``, git blob ids); a file without a registered SHA-256 has it recorded on first download
(``checksums.json``).  Layout, origins and checks: docs/data.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urlparse

from hqa.errors import DataError

__all__ = ["DataFile", "Dataset", "Downloader", "data_dir", "data_path", "dataset", "datasets", "file_status", "mirror",
           "origin_url", "pull", "require", "require_dataset"]

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


def _mirror_url(base: str, f: DataFile) -> str:
    if urlparse(base).scheme in ("http", "https"):
        return base.rstrip("/") + "/" + f.file
    return str(Path(base.removeprefix("file://")).expanduser() / f.file)


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
class NotThere(Exception):
    """The source does not have the file (HTTP 404/410, no such file in a mirror folder): not worth a retry."""


class Downloader:
    """A pooch downloader (``downloader(url, output_file, pooch)``) that resumes and checks git blob ids.

    HTTP(S) bodies go to ``part`` (``<target>.part``), continued by a ``Range`` request on a later try; a 404 raises
    :class:`NotThere` (pooch does not retry it); a local path (a mirror folder) is copied.  A file without the
    ``git_blob`` given is a ValueError (pooch retries it); the finished file replaces pooch's ``output_file``.
    """

    def __init__(self, part: Path, git_blob: str | None = None, progress: bool = False, retries: int = 4,
                 timeout: float = 30.0, user_agent: str = "hqa") -> None:
        self.part, self.git_blob, self.progress = Path(part), git_blob, progress
        self.retries, self.timeout, self.user_agent = retries, timeout, user_agent

    def _session(self):
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        session = requests.Session()
        retry = Retry(total=self.retries, connect=min(self.retries, 2), read=0, status=self.retries, backoff_factor=0.5,
                      status_forcelist=(429, 500, 502, 503, 504), respect_retry_after_header=True,
                      raise_on_status=False, allowed_methods=None)
        session.mount("http://", HTTPAdapter(max_retries=retry))
        session.mount("https://", HTTPAdapter(max_retries=retry))
        session.headers["User-Agent"] = self.user_agent
        return session

    def __call__(self, url: str, output_file: str, pooch_obj: Any = None, check_only: bool = False) -> None:
        if urlparse(url).scheme not in ("http", "https"):
            src = Path(url)
            if not src.is_file():
                raise NotThere("no such file")
            shutil.copyfile(src, self.part)
        else:
            self._http(url)
        if self.git_blob and _hash_file(self.part, "sha1") != self.git_blob:
            got = self.part.stat().st_size
            self.part.unlink()
            raise ValueError(f"git blob id of the {got}-byte download differs from the origin's {self.git_blob}")
        os.replace(self.part, output_file)

    def _http(self, url: str) -> None:
        import requests

        start = self.part.stat().st_size if self.part.exists() else 0
        headers = {"Range": f"bytes={start}-"} if start else {}
        with self._session() as session:
            try:
                r = session.get(url, stream=True, timeout=self.timeout, headers=headers)
            except requests.ConnectionError as exc:  # no connection at all (urllib3 retried it): not pooch's to retry
                raise NotThere(f"unreachable ({type(exc).__name__})") from None
            with r:
                self._body(url, r, start)

    def _body(self, url: str, r, start: int) -> None:
        """Append the response body to the part file (from ``start`` on a 206), with a progress bar."""
        import requests

        if r.status_code in (404, 410):
            raise NotThere(f"HTTP {r.status_code}")
        if r.status_code == 416:  # the part is not a prefix of this file: start over
            self.part.unlink(missing_ok=True)
            raise requests.HTTPError(f"HTTP 416 for a resumed download of {url}")
        r.raise_for_status()
        if start and r.status_code != 206:
            start = 0  # the server sent the whole file
        length = r.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else None
        from tqdm import tqdm

        with open(self.part, "ab" if start else "wb") as fh, tqdm(
                total=total, initial=start, unit="B", unit_scale=True, leave=False, file=sys.stderr,
                desc=Path(urlparse(url).path).name, disable=not self.progress) as bar:
            for chunk in r.iter_content(CHUNK):
                fh.write(chunk)
                bar.update(len(chunk))


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fetch(ds: Dataset, f: DataFile, root: Path, base: str | None, progress: bool, settings) -> str:
    """Bring one file into ``root`` (mirror first, then origin); returns where it came from.  The old file stays
    unless the new one passed its checks."""
    import pooch
    from filelock import FileLock

    pooch.get_logger().setLevel("WARNING")
    target = root / f.file
    target.parent.mkdir(parents=True, exist_ok=True)
    sources = ([("mirror", _mirror_url(base, f))] if base else []) + (
        [("origin", origin_url(ds, f))] if origin_url(ds, f) else [])
    failures: list[str] = []
    unreachable = False
    with FileLock(str(target) + ".lock"):
        for kind, url in sources:
            known = _known_hash(root, f)
            if target.is_file() and known and _hash_file(target, "sha256") == known:
                return "present"
            puppy = pooch.create(path=root, base_url="", registry={f.file: known}, urls={f.file: url},
                                 retry_if_failed=settings.http.max_retries)
            down = Downloader(Path(str(target) + ".part"), git_blob=None if known else f.git_blob,
                              progress=progress, retries=settings.http.max_retries,
                              timeout=max(settings.http.timeout, 30.0), user_agent=settings.http.user_agent)
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
            except NotThere as exc:
                failures.append(f"{kind} {url}: {exc}")
                unreachable = True
                continue
            except Exception as exc:  # noqa: BLE001 - requests / checksum / OS errors: the next source, then one line
                import requests

                failures.append(f"{kind} {url}: {_short(exc)}")
                unreachable = isinstance(exc, (requests.ConnectionError, requests.Timeout))
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
