"""A loopback data origin for the data-directory tests: an HTTP server that serves files under the URL layout of the
real origins (``/<owner>/<repo>/<commit>/<path>`` as raw.githubusercontent.com, ``/datasets/<repo>/resolve/<commit>/
<path>`` as Hugging Face), honours ``Range: bytes=N-`` with 206 as both do, and misbehaves on request: a 404, a 429
with ``Retry-After``, a body cut short (Content-Length matching the short body), a connection dropped mid-file
(Content-Length of the whole file, then the socket closed), wrong bytes, a 500, or a body that never ends."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
from pathlib import Path


#: where an "endless" body stops after all: past every bound the tests set (64 kB files, a 1 MB ceiling)
ENDLESS_GUARD = 64 << 20


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Origin:
    """``files``: URL path → bytes.  ``faults``: URL path → list of faults, one used per request, in order:
    ``"404"``, ``"429"`` (Retry-After: 3), ``"429-hour"`` (Retry-After: 3600), ``"500"``, ``"truncate"`` (half the
    body, Content-Length saying so), ``"drop"`` (Content-Length of the whole, half the body, connection closed),
    ``"wrong"`` (other bytes, same length), ``"endless"`` (200 with no Content-Length and a body that ends only when
    the client goes away, or at :data:`ENDLESS_GUARD` so that a client which never stops cannot fill the test
    machine's disk).  ``requests``: (path, Range header or None, monotonic time) of
    every request."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, list[str]] = {}
        self.requests: list[tuple[str, str | None, float]] = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                origin.requests.append((path, self.headers.get("Range"), time.monotonic()))
                fault = origin.faults.get(path, []).pop(0) if origin.faults.get(path) else None
                body = origin.files.get(path)
                if body is None or fault == "404":
                    self._send(404, b"Not Found")
                    return
                if fault in ("429", "429-hour"):
                    self._send(429, b"Too Many Requests", {"Retry-After": "3" if fault == "429" else "3600"})
                    return
                if fault == "500":
                    self._send(500, b"Internal Server Error")
                    return
                if fault == "endless":
                    self._endless()
                    return
                if fault == "wrong":
                    body = bytes(b ^ 0x20 for b in body)
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    if start >= len(body):
                        self._send(416, b"")
                        return
                part = body[start:]
                status = 206 if start else 200
                extra = {"Content-Range": f"bytes {start}-{len(body) - 1}/{len(body)}"} if start else {}
                if fault == "truncate":
                    self._send(status, part[: len(part) // 2], extra)
                elif fault == "drop":
                    self.send_response(status)
                    for k, v in {**extra, "Content-Length": str(len(part))}.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(part[: len(part) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self._send(status, part, extra)

            def _endless(self) -> None:
                """200, no Content-Length (the body ends with the connection), and bytes until the client leaves."""
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                piece, sent = b"x" * 65536, 0
                try:
                    while sent < ENDLESS_GUARD:
                        self.wfile.write(piece)
                        sent += len(piece)
                except OSError:  # the client closed the connection
                    pass

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Origin":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, path: str) -> int:
        return sum(1 for p, _r, _t in self.requests if p == path)


def registry_entry(name: str, host: str, repo: str, commit: str, files: dict[str, tuple[str, bytes]],
                   pin: bool = True, license: str = "CC BY 4.0") -> dict:
    """A registry dataset for ``files`` (data-dir name → (origin path, bytes)); ``pin=False`` leaves the SHA-256 out
    (recorded on first download, the git blob id checked)."""
    return {"name": name, "what": f"test dataset {name}", "host": host, "repo": repo, "commit": commit,
            "license": license,
            "files": [{"file": rel, "path": path, "size": len(data) if pin else None,
                       "sha256": hashlib.sha256(data).hexdigest() if pin else None,
                       "git_blob": git_blob(data) if host == "github" else None}
                      for rel, (path, data) in files.items()]}


def serve_registry(origin: Origin, registry: dict, contents: dict[str, bytes]) -> None:
    """Put ``contents`` (data-dir name → bytes) on ``origin`` under each file's origin URL path."""
    for ds in registry["datasets"]:
        for f in ds["files"]:
            if ds["host"] == "github" and f["path"]:
                origin.files[f"/{ds['repo']}/{ds['commit']}/{f['path']}"] = contents[f["file"]]
            elif ds["host"] == "huggingface":
                origin.files[f"/datasets/{ds['repo']}/resolve/{ds['commit']}/{f['path']}"] = contents[f["file"]]
