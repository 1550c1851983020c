"""One polite HTTP layer for live sources, with a record/replay cache (requests-cache's SQLite backend).

Modes ``live``, ``record``, ``replay`` (a miss raises :class:`NotInCache`) and ``off``, and the politeness rules
(after the Wikimedia User-Agent and API etiquette pages), are described in docs/live.md.  A host whose ``Retry-After``
exceeds ``retry_after_cap`` is treated as down for that long: that request and the host's next ones fail at once, an
outage observation within seconds rather than minutes of retries.  The body is streamed and reading stops at
``max_bytes``.  Every failure is an :class:`HTTPFailure` subclass whose message is meant for a trace observation.

Libraries do the work: requests-cache's ``CachedSession`` the record/replay (``force_refresh`` records,
``only_if_cached`` replays, entries never expire), tenacity the retry loop and the jittered exponential backoff
(``wait_random_exponential``), urllib3 the ``Retry-After`` parsing (seconds or an HTTP date), both through
:mod:`hqa.io.waits`, which the data downloads share. Kept by hand, each for a stated reason: the per-host limit is a
semaphore because the setting bounds simultaneous requests (a rate limiter such as pyrate-limiter bounds requests per
interval and lets them overlap); urllib3's ``Retry`` is not used for 429/503 because it sleeps with ``time.sleep``
inside the adapter, so it cannot see a maxlag error object that MediaWiki front ends also send with HTTP 200, and
cannot be given the injected sleep the wire tests observe.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

import requests
import tenacity
from requests_cache import CachedSession, SQLiteCache

from hqa.config import HTTPConfig
from hqa.errors import EndpointError
from hqa.io import cancel
from hqa.io.waits import Backoff, too_long

MODES = ("live", "record", "replay", "off")
#: redirects followed per request (requests' default is 30); a loop past it fails once, not retried (a value chosen
#: here: Wikimedia's API and SPARQL endpoints redirect at most once or twice)
MAX_REDIRECTS = 10


class HTTPFailure(EndpointError):
    """A request that did not produce a usable answer; ``str(exc)`` is a one-line observation."""

    def __init__(self, message: str, status: int | None = None, body_head: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body_head = body_head


class NotInCache(HTTPFailure):
    """Replay mode and the request was never recorded."""


class TooLarge(HTTPFailure):
    """The response body exceeded ``max_bytes``."""


class BadResponse(HTTPFailure):
    """Non-JSON (HTML error page, truncated body) or an API error object."""


class Unavailable(HTTPFailure):
    """Network error, timeout, or retries exhausted on 429/503/maxlag; ``attempts``: the tries made (0: none, the
    host was already treated as down)."""

    def __init__(self, message: str, attempts: int = 0) -> None:
        super().__init__(message)
        self.attempts = attempts


class _Retryable(Exception):
    """One failed try worth another (timeout, unreachable, 429/503, maxlag); ``retry_after`` as the server sent it;
    ``silent``: the host took the request and gave no (complete) answer in time: it hangs or drips."""

    def __init__(self, message: str, retry_after: str | None = None, silent: bool = False) -> None:
        super().__init__(message)
        self.retry_after, self.silent = retry_after, silent


class HTTPClient:
    """GET/POST JSON through the cache with the politeness rules above.  Thread-safe."""

    def __init__(self, settings: HTTPConfig, *, sleep: Callable[[float], None] | None = None) -> None:
        if settings.cache_mode not in MODES:
            raise HTTPFailure(f"http cache_mode {settings.cache_mode!r} is not one of {', '.join(MODES)}")
        self.settings = settings
        self._cached_session: CachedSession | None = None  # opened on first use: no file until a request needs it
        self._plain = requests.Session()
        self._plain.headers["User-Agent"] = settings.user_agent
        self._plain.max_redirects = MAX_REDIRECTS
        self._sleep = sleep if sleep is not None else cancel.sleep  # one a timed-out request's cancellation ends early
        self._waits = Backoff(settings.backoff_base, settings.backoff_cap)
        self._lock = threading.Lock()
        self._host_limits: dict[str, threading.BoundedSemaphore] = {}
        self._host_down: dict[str, tuple[float, str]] = {}  # host -> (monotonic time it may be asked again, why)
        self.network_requests = self.network_bytes = self.cache_hits = 0  # bytes: response bodies from the network

    @property
    def _session(self) -> requests.Session:
        """The session requests go through: a plain one in mode ``off``, else requests-cache's ``CachedSession``."""
        if self.settings.cache_mode == "off":
            return self._plain
        with self._lock:
            if self._cached_session is None:
                session = CachedSession(
                    self.settings.cache_path or "hqa_http_cache", backend="sqlite", serializer="json",
                    expire_after=-1, allowable_methods=("GET", "HEAD", "POST"), allowable_codes=range(200, 400),
                    filter_fn=lambda r: not _is_maxlag(r))  # a maxlag error object is retried, never stored
                session.headers["User-Agent"] = self.settings.user_agent
                session.max_redirects = MAX_REDIRECTS
                self._cached_session = session
            return self._cached_session

    def _cache_file_exists(self) -> bool:
        path = Path(self.settings.cache_path or "hqa_http_cache")
        return (self._cached_session is not None or path.exists()
                or path.with_name(path.name + ".sqlite").exists())

    # -- public -----------------------------------------------------------------------------------------------
    def get_json(self, url: str, params: dict[str, Any] | None = None, *, mediawiki: bool = False) -> Any:
        """GET ``url`` and decode JSON.  ``mediawiki=True`` adds ``maxlag`` and checks the API error object."""
        params = dict(params or {})
        if mediawiki:
            params.setdefault("format", "json")
            params.setdefault("formatversion", "2")
            params.setdefault("maxlag", str(self.settings.maxlag))
        return _decode(self.get_bytes(url, params, mediawiki=mediawiki), url)

    def get_bytes(self, url: str, params: dict[str, Any] | None = None, *, mediawiki: bool = False,
                  headers: dict[str, str] | None = None, data: dict[str, str] | None = None,
                  judge_host: bool = True) -> bytes:
        """The body of GET ``url?params`` (or a form POST of ``data``), through the cache per the mode.
        ``judge_host``: a request the host gave no answer to in its tries marks the host down (:meth:`mark_down`);
        False for a request whose own cost may be why (a SPARQL query)."""
        cancel.check()  # a timed-out request asks no source again (hqa.io.cancel)
        try:
            return self._get_bytes(url, params, mediawiki=mediawiki, headers=headers, data=data,
                                   judge_host=judge_host)
        except sqlite3.DatabaseError as exc:  # the cache file, not the source: one line naming it
            raise _corrupt(self.settings.cache_path or "hqa_http_cache", exc) from None

    def _get_bytes(self, url: str, params: dict[str, Any] | None, *, mediawiki: bool,
                   headers: dict[str, str] | None, data: dict[str, str] | None, judge_host: bool) -> bytes:
        mode = self.settings.cache_mode
        request = requests.Request("POST" if data is not None else "GET", url, params=params, data=data,
                                   headers=headers, hooks={"response": self._read_bounded})
        if mode == "replay" and not self._cache_file_exists():  # a miss without opening (and creating) the file
            raise NotInCache(f"{_short(request.prepare().url)} is not in the recorded cache")
        prepared = self._session.prepare_request(request)
        if mode in ("live", "replay"):  # the cache first, outside the per-host limit, which bounds network requests
            hit = self._session.send(prepared.copy(), only_if_cached=True)
            if not _is_miss(hit):
                with self._lock:
                    self.cache_hits += 1
                return hit.content
            if mode == "replay":
                raise NotInCache(f"{_short(prepared.url)} is not in the recorded cache")
        # ``force_refresh`` (record) asks the origin for a fresh copy: it sends ``Cache-Control: no-cache``
        extra = {"force_refresh": True} if mode == "record" else {}
        try:
            return tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(_Retryable), wait=self._wait, sleep=self._sleep,
                stop=self._stop,
            )(self._try_once, prepared, mediawiki, extra).content
        except tenacity.RetryError as exc:
            last, attempts = exc.last_attempt.exception(), exc.last_attempt.attempt_number
            gave_up = f"{last}; gave up after {attempts} attempt{'s' if attempts > 1 else ''}"
            if getattr(last, "silent", False) and judge_host:
                gave_up = self.mark_down(prepared.url or "", f"it gave no answer within {attempts} "
                                         f"tr{'ies' if attempts > 1 else 'y'} of {self.settings.timeout:g}s", gave_up)
            raise Unavailable(gave_up, attempts) from None

    def mark_down(self, url: str, why: str, message: str = "") -> str:
        """Treat the host of ``url`` as down for ``down_for`` seconds (``why``): its next requests fail at once.
        ``message`` with what that means appended (unchanged when ``down_for`` is 0)."""
        down_for = self.settings.down_for
        if down_for <= 0:
            return message
        host = urlparse(url).netloc
        with self._lock:
            self._host_down[host] = (time.monotonic() + down_for, why)
        return f"{message}: {host} is treated as down for {down_for:g}s (http.down_for)"

    # -- internals --------------------------------------------------------------------------------------------
    def _host_limit(self, url: str) -> threading.BoundedSemaphore:
        host = urlparse(url).netloc
        with self._lock:
            if host not in self._host_limits:
                self._host_limits[host] = threading.BoundedSemaphore(max(1, self.settings.per_host_concurrency))
            return self._host_limits[host]

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before try ``attempt + 2`` (:class:`hqa.io.waits.Backoff`)."""
        return self._waits.seconds(attempt, retry_after)

    def _stop(self, state: tenacity.RetryCallState) -> bool:
        """tenacity's stop: after ``max_retries`` + 1 tries, or after ``timeout_retries`` + 1 when the last one timed
        out: a source that hangs or drips is given up within (``timeout_retries`` + 1) × ``timeout``."""
        exc = state.outcome.exception() if state.outcome else None
        if getattr(exc, "silent", False):
            return state.attempt_number >= min(self.settings.max_retries, self.settings.timeout_retries) + 1
        return state.attempt_number >= self.settings.max_retries + 1

    def _wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self._backoff(state.attempt_number - 1, getattr(exc, "retry_after", None))

    def _check_host(self, url: str) -> None:
        """Unavailable at once while the host of ``url`` is marked down: by a Retry-After past the cap, or because
        it gave no answer within its tries (:meth:`mark_down`)."""
        parsed = urlparse(url)
        with self._lock:
            until, why = self._host_down.get(parsed.netloc, (0.0, ""))
        left = until - time.monotonic()
        if left > 0:
            endpoint = f"{parsed.scheme}://{parsed.netloc}{parsed.path}"
            raise Unavailable(f"{_short(endpoint)} not asked: {parsed.netloc} is treated as down for {left:.0f}s more "
                              f"({why})")

    def _refuse_long_wait(self, url: str, response: requests.Response, what: str) -> None:
        """A Retry-After beyond ``retry_after_cap``: the host is marked down for that long and this request fails
        now (an outage observation) instead of sleeping through retries."""
        cap = self.settings.retry_after_cap
        wait = too_long(response.headers.get("Retry-After"), cap)
        if wait is None:
            return
        host = urlparse(url).netloc
        why = f"{what} with Retry-After {wait:.0f}s, beyond the {cap:g}s cap (http.retry_after_cap)"
        with self._lock:
            self._host_down[host] = (time.monotonic() + wait, why)
        raise Unavailable(f"{_short(url)} {why}: treated as an outage")

    def _try_once(self, prepared: requests.PreparedRequest, mediawiki: bool, extra: dict) -> requests.Response:
        url = _short(prepared.url)
        self._check_host(prepared.url or "")
        with self._host_limit(prepared.url or ""):
            try:
                response = self._attempt(prepared.copy(), extra)
            except (requests.RequestException, TimeoutError) as exc:
                self._count(None)
                if isinstance(exc, requests.TooManyRedirects):  # a redirect loop does not heal on a retry
                    raise BadResponse(f"{url} redirected more than {MAX_REDIRECTS} times (a redirect loop?)") from None
                timed_out = isinstance(exc, (requests.Timeout, TimeoutError))
                raise _Retryable(f"{url} timed out after {self.settings.timeout}s" if timed_out
                                 else f"{url} unreachable: {type(exc).__name__}", silent=timed_out) from None
        if getattr(response, "from_cache", False):  # live: another thread stored it since the lookup
            with self._lock:
                self.cache_hits += 1
            return response
        self._count(response)
        maxlag = mediawiki and _is_maxlag(response)
        if response.status_code in (429, 503) or maxlag:
            self._refuse_long_wait(prepared.url or "", response, f"answered HTTP {response.status_code}")
            raise _Retryable(f"{url} answered HTTP {response.status_code}" + (" (maxlag)" if maxlag else ""),
                             response.headers.get("Retry-After"))
        if response.status_code >= 400:
            head = " ".join((response.content or b"")[:300].decode("utf-8", "replace").split())
            raise BadResponse(f"{url} answered HTTP {response.status_code}", status=response.status_code,
                              body_head=head)
        return response

    def _count(self, response: requests.Response | None) -> None:
        with self._lock:
            self.network_requests += 1
            self.network_bytes += len(response.content or b"") if response is not None else 0

    def _attempt(self, prepared: requests.PreparedRequest, extra: dict) -> requests.Response:
        """One exchange in a helper thread given at most ``timeout`` seconds of wall time in total: requests'
        timeout bounds each socket read, so a server trickling its headers or body byte by byte could otherwise
        hold the caller indefinitely."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = self._session.send(prepared, stream=True, timeout=self.settings.timeout, **extra)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box["error"] = exc

        worker = threading.Thread(target=run, name="hqa-http", daemon=True)
        worker.start()
        worker.join(self.settings.timeout + 0.25)
        if worker.is_alive():
            raise TimeoutError(f"no complete reply within {self.settings.timeout:g}s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _read_bounded(self, response: requests.Response, **_: Any) -> requests.Response:
        """requests' ``response`` hook: read the streamed body up to ``max_bytes`` before requests-cache stores it."""
        if getattr(response, "from_cache", False) or response._content_consumed:  # noqa: SLF001
            return response
        limit = self.settings.max_bytes
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > limit:
            response.close()
            raise TooLarge(f"{response.url} body of {declared} bytes exceeds the {limit}-byte bound")
        body = bytearray()
        for chunk in response.iter_content(65536):
            body += chunk
            if len(body) > limit:
                response.close()
                raise TooLarge(f"{response.url} body exceeds the {limit}-byte bound")
        response._content = bytes(body)  # noqa: SLF001 - requests' documented way to hold a read body
        response._content_consumed = True  # noqa: SLF001
        return response


def _short(url: str | None, n: int = 200) -> str:
    url = url or ""
    return url if len(url) <= n else url[:n] + "…"


def _is_miss(response: requests.Response) -> bool:
    """requests-cache's answer to ``only_if_cached`` when nothing is stored: a synthetic 504 "Not Cached"."""
    return response.status_code == 504 and response.reason == "Not Cached"


def _is_maxlag(response: requests.Response) -> bool:
    if b"maxlag" not in (response.content or b""):  # most bodies: no JSON parse
        return False
    try:
        data = json.loads(response.content or b"null")
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), dict) and data["error"].get("code") == "maxlag"


def _decode(body: bytes, url: str) -> Any:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        head = body[:60].decode("utf-8", "replace").replace("\n", " ")
        raise BadResponse(f"{url} did not answer JSON (starts {head!r})") from None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        err = data["error"]
        raise BadResponse(f"{url} API error {err.get('code')}: {err.get('info', '')}")
    return data


class CorruptCache(HTTPFailure):
    """The SQLite file of the HTTP cache is not a readable database."""


def _corrupt(path: str | Path, exc: BaseException) -> CorruptCache:
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return CorruptCache(f"HTTP cache {path} is corrupt ({first}): move it away or delete it (hqa records a new "
                        "one), or point http.cache_path elsewhere")


def cache_stats(path: str | Path) -> dict[str, Any]:
    try:
        cache = SQLiteCache(str(path), serializer="json")
        keys = list(cache.responses.keys())
        size = sum(len(r.content) for r in cache.responses.values())
        hosts = dict(Counter(urlparse(r.url).netloc for r in cache.responses.values()))
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, exc) from None
    return {"path": str(path), "responses": len(keys), "bytes": size, "hosts": hosts}


def cache_export(path: str | Path, out: str | Path) -> int:
    """Write every cached response as JSON lines (requests-cache's JSON serializer form) to ``out``."""
    n = 0
    try:
        cache = SQLiteCache(str(path), serializer="json")
        with open(out, "w", encoding="utf-8") as fh:
            for key in cache.responses.keys():
                raw = cache.responses.serializer.dumps(cache.responses[key])
                fh.write(json.dumps({"key": key, "response": raw if isinstance(raw, str) else raw.decode()}) + "\n")
                n += 1
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, exc) from None
    return n


def cache_import(path: str | Path, src: str | Path) -> int:
    try:
        cache = SQLiteCache(str(path), serializer="json")
        next(iter(cache.responses.keys()), None)  # a file that is not a database fails here, before any import
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, exc) from None
    n = 0
    with open(src, "rb") as fh:
        for lineno, raw_line in enumerate(fh, 1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadResponse(f"{src}:{lineno}: not UTF-8 (byte {exc.start + 1} of the line); the {n} records "
                                  "before it were imported") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                response = cache.responses.serializer.loads(rec["response"])
                key = rec["key"]
            except (ValueError, KeyError, TypeError) as exc:
                raise BadResponse(f"{src}:{lineno}: not an exported cache record ({type(exc).__name__})") from None
            cache.responses[key] = response
            n += 1
    return n
