"""``hqa`` command line: the parser (one subcommand per module of :mod:`hqa.cli`), :func:`main` and the process exit.

Every user-caused failure (``HQAError``) prints one line on stderr and exits 2; Ctrl-C exits 130; any other exception
prints one line naming a log file with its traceback and exits 1 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Sequence

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from hqa.cli.args import Help, Parser, add_shared  # noqa: E402
from hqa.cli.output import escape_controls  # noqa: E402
from hqa.cli.registry import COMMANDS, command  # noqa: E402
from hqa.errors import HQAError  # noqa: E402


class _Commands(argparse._SubParsersAction):
    """The subcommands of :data:`hqa.cli.registry.COMMANDS`, each parser filled in (its module imported) only when
    its name is on the command line."""

    def __call__(self, parser, namespace, values, option_string=None):
        name = values[0]
        sub = self._name_parser_map.get(name)
        if sub is not None and not getattr(sub, "_hqa_filled", False):
            module = command(name)
            module.add_arguments(sub)
            sub.set_defaults(func=module.run)
            sub._hqa_filled = True
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hqa", description="Hybrid-source question answering with DSPy programs",
                                formatter_class=Help)
    add_shared(p, suppress=False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser, action=_Commands)
    for name, cmd in COMMANDS.items():
        sub.add_parser(name, help=cmd.help)
    return p


def _write_crash_log() -> str:
    """The current exception's traceback written to a new file under the temp folder; its path."""
    import tempfile
    import traceback

    try:
        fd, path = tempfile.mkstemp(prefix="hqa-error-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(" ".join(sys.argv) + "\n\n" + traceback.format_exc())
        return path
    except OSError as exc:
        return f"(no log written: {exc.strerror or exc})"


def take_interrupts() -> None:
    """Ctrl-C (SIGINT) ends every command with "hqa: interrupted" and exit 130, also when hqa was started with SIGINT
    ignored, as a shell script starts a background job (``hqa compile --force & … kill -INT``).  Python keeps an
    inherited SIG_IGN, but DSPy's parallel evaluation and uvicorn install their own handlers while they run: SIGINT
    then stopped a compile in those phases only and was ignored in the others, and the compile ran on to save."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    take_interrupts()
    parser = build_parser()
    args = parser.parse_args(argv)
    from hqa.io.logs import configure_output

    configure_output(getattr(args, "verbose", 0) or 0)  # quiet by default: hqa's own warnings, once each
    try:
        code = args.func(args)
        if COMMANDS[args.command].fast_exit:  # the answer is out and nothing is left running: end at once
            _FAST_EXIT.append(True)
        return code
    except HQAError as exc:  # messages may quote input (a dump line, a file name): its control bytes escaped
        print(f"hqa: error: {escape_controls(exc)}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return _reader_gone()
    except OSError as exc:
        if exc.filename is None or getattr(args, "debug", False):
            return _unexpected(exc, args)
        # a file the command was told to read or write (--out /proc/x, a full disk, a folder without permission)
        print(f"hqa: error: cannot use {escape_controls(exc.filename)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the last-resort handler
        return _unexpected(exc, args)
    except KeyboardInterrupt:
        print("hqa: interrupted", file=sys.stderr)
        return 130


def _reader_gone() -> int:
    """stdout's reader went away (``hqa world show | head -1``): one line on stderr, stdout pointed at /dev/null so
    the interpreter's final flush does not fail again, and the exit status a process killed by SIGPIPE has."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    try:
        print("hqa: output stopped: the command reading it exited (broken pipe)", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return 141


def _unexpected(exc: BaseException, args: argparse.Namespace) -> int:
    """Any other exception, called inside main's ``except``: DSPy's LM errors as a line, the rest as one line naming
    a log file with the traceback (``--debug`` re-raises)."""
    try:
        from dspy.utils.exceptions import LMError
    except Exception:  # noqa: BLE001 - the last-resort handler must not fail on an import
        LMError = ()  # type: ignore[assignment]  # noqa: N806
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if LMError and isinstance(exc, LMError):
        print(f"hqa: error: the LM failed ({type(exc).__name__}): {first[:300]}", file=sys.stderr)
        return 2
    if getattr(args, "debug", False):
        raise exc
    log = _write_crash_log()
    print(f"hqa: error: unexpected {type(exc).__name__}: {escape_controls(first[:300])} (details in {log}; rerun "
          "with --debug for the traceback)", file=sys.stderr)
    return 1


_FAST_EXIT: list[bool] = []


def run() -> None:
    """The ``hqa`` command: :func:`main`, then after a finished ``hqa ask`` the process ends without tearing the
    interpreter down (:func:`_exit_now`): freeing dspy's, litellm's and the retrievers' objects one by one took
    ~0.7 s (issue 31) of a command whose target is 3 s."""
    code = main()
    try:
        sys.stdout.flush()  # what is still buffered goes now, where a gone reader is one line (not at teardown)
    except BrokenPipeError:
        code = _reader_gone()
    if _FAST_EXIT:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """End the process with ``code`` as a normal exit would, in the same order, minus module teardown and garbage
    collection: streams flushed, non-daemon threads finished, the ``atexit`` handlers run, then ``os._exit``."""
    import atexit
    import threading

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be shown
            pass
    shutdown = getattr(threading, "_shutdown", None)  # CPython's own first exit step
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
