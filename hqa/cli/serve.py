"""``hqa serve``: the HTTP API and web page over one program (FastAPI + uvicorn, hqa.serve)."""

from __future__ import annotations

import argparse
import os
import sys

from hqa.cli import args as shared
from hqa.errors import ConfigError


def add_arguments(sp: argparse.ArgumentParser) -> None:
    shared.add_program_args(sp)
    sp.add_argument("--host", default="127.0.0.1", help="bind address (beyond loopback needs an API key)")
    sp.add_argument("--port", type=int, default=8000, help="TCP port")
    sp.add_argument("--workers", type=int, default=2, help="questions answered at once")
    sp.add_argument("--queue", type=int, default=16, help="requests allowed to wait; beyond that 503 busy")
    sp.add_argument("--timeout", type=float, default=300.0, help="seconds per request before 504")
    sp.add_argument("--max-body-bytes", type=int,
                    help="largest request body read (default 64 KiB); larger ones get 413 before they are read")
    sp.add_argument("--read-timeout", type=float, default=10.0, metavar="SECONDS",
                    help="time a client has to send its request headers, then each piece of its body (default 10; "
                         "slower connections are closed / answered 408)")
    sp.add_argument("--body-timeout", type=float, default=30.0, metavar="SECONDS",
                    help="time a client has to send its whole request body, however it paces it (default 30; "
                         "slower bodies are answered 408)")
    sp.add_argument("--api-key-env", default="HQA_API_KEY",
                    help="environment variable holding the API key (Authorization: Bearer)")


def run(args: argparse.Namespace) -> int:
    from hqa.app import warm_up
    from hqa.artifacts.store import list_artifacts
    from hqa.serve import ServeOptions, check_bind, create_app

    api_key = os.environ.get(args.api_key_env) or None
    check_bind(args.host, api_key)
    if not 1 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a TCP port")
    from hqa.serve.api import MAX_BODY_BYTES

    max_body = MAX_BODY_BYTES if args.max_body_bytes is None else args.max_body_bytes
    if args.workers < 1 or args.queue < 0 or args.timeout <= 0 or max_body < 1024:
        raise ConfigError("--workers must be >= 1, --queue >= 0, --timeout > 0 and --max-body-bytes >= 1024")
    for name in ("read_timeout", "body_timeout"):
        value = getattr(args, name)
        if not 0 < value <= 3600:
            raise ConfigError(f"--{name.replace('_', '-')} must be between 0 and 3600 seconds, got {value:g}")
    sock = _listen(args.host, args.port)  # a busy port is one line before anything is loaded or announced
    with sock:  # closed however the command ends: a program that cannot load leaves no open socket behind
        settings = shared.settings(args)
        opened = shared.open_program(args, settings)
        shared.trace_questions(args, settings, opened)  # every question an MLflow trace (module, LM and tool spans)
        app = create_app(opened, options=ServeOptions(workers=args.workers, queue=args.queue, timeout=args.timeout,
                                                      api_key=api_key, max_body_bytes=max_body,
                                                      read_timeout=args.read_timeout,
                                                      body_timeout=args.body_timeout),
                         warmup=lambda: warm_up(settings, opened),
                         programs=lambda: list_artifacts(settings.artifacts_dir / "programs"))
        _log_access()
        from hqa.serve.server import run as serve

        print(f"hqa: serving {opened.label} on http://{args.host}:{args.port}/ (docs at /docs)", file=sys.stderr,
              flush=True)
        serve(app, sock, header_timeout=args.read_timeout)  # uvicorn, with a header-read timeout (slowloris)
    return 0


def _log_access() -> None:
    """One line on stderr per request (the ``hqa.access`` logger), nothing else of the logging tree."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access = logging.getLogger("hqa.access")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False


def _listen(host: str, port: int):
    """A socket bound to ``host:port`` and listening (handed to uvicorn); a port in use or an address this machine
    does not have is a one-line ConfigError."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        import errno

        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use: stop what listens there or pass --port")
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    sock.set_inheritable(True)
    return sock
