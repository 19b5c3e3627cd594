"""Every command line ends a failure in one named line: ``<prog>: error: <Type>: <message> (set TALENTRL_TRACEBACK=1
for the traceback)`` on stderr and exit code 1; a config error stays ``config error: …`` with exit code 2; a stage
paused at its time budget (``talentrl_core.checkpoints.Paused``) says so in one line and exits 75.
``TALENTRL_TRACEBACK=1`` re-raises instead, so the full traceback shows. KeyboardInterrupt and SystemExit (argparse's
usage errors, an explicit exit code) pass through untouched.

    @named_errors("pipeline.seeds")          # a main() that returns an exit code: an exception becomes 1 (or 2)
    def main(argv=None) -> int: ...

    with named_errors("bench_webshop"):      # around any block: an exception becomes SystemExit(1) after the line
        main()

Only the standard library is imported here, so bench scripts and ``talentrl_core`` callers can use it cheaply.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable, Optional

TRACEBACK_ENV = "TALENTRL_TRACEBACK"
HINT = f"(set {TRACEBACK_ENV}=1 for the traceback)"
CONFIG_EXIT = 2
FAILURE_EXIT = 1


def want_traceback() -> bool:
    """Whether ``TALENTRL_TRACEBACK`` asks for tracebacks (set and not 0/false/no/empty)."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _is_config_error(err: BaseException) -> bool:
    return any(c.__name__ == "ConfigError" and c.__module__ == "pipeline.config" for c in type(err).__mro__)


def _is_paused(err: BaseException) -> bool:
    return any(c.__name__ == "Paused" and c.__module__ == "talentrl_core.checkpoints" for c in type(err).__mro__)


def describe(err: BaseException) -> str:
    """``Type: message`` on one line. The type is left out where it says nothing the message does not: the project's
    own errors and plain ``ValueError``/``RuntimeError``/``OSError`` raised with a message of ours (no errno).

    >>> describe(KeyError("talent_id"))
    "KeyError: 'talent_id'"
    >>> describe(ValueError("sft.lr=0.0: must be > 0"))
    'sft.lr=0.0: must be > 0'
    >>> describe(FileNotFoundError(2, "No such file or directory", "x/y"))
    "FileNotFoundError: [Errno 2] No such file or directory: 'x/y'"
    >>> describe(RuntimeError("line one\\n  line two"))
    'line one / line two'
    """
    msg = " / ".join(ln.strip() for ln in str(err).splitlines() if ln.strip())
    own = type(err).__module__.split(".")[0] in ("talentrl_core", "pipeline")
    plain = type(err) in (ValueError, RuntimeError) or (isinstance(err, OSError) and err.errno is None and bool(msg))
    if msg and (own or plain):
        return msg
    return f"{type(err).__name__}: {msg}" if msg else type(err).__name__


def report(prog: str, err: BaseException) -> int:
    """Print ``err`` as one named line and return the exit code (2 for a config error, else 1); with
    ``TALENTRL_TRACEBACK=1`` re-raise it instead. Call it from inside an ``except`` block."""
    if _is_paused(err):  # not a failure: a stage paused at its time budget; said once under torchrun/accelerate
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"{prog}: {err}", file=sys.stderr, flush=True)
        return int(err.exit_code)
    if want_traceback():
        raise err
    if _is_config_error(err):
        print(f"config error: {err}", file=sys.stderr, flush=True)
        return CONFIG_EXIT
    print(f"{prog}: error: {describe(err)} {HINT}", file=sys.stderr, flush=True)
    return FAILURE_EXIT


class named_errors:  # noqa: N801 (used like contextlib's lower-case helpers)
    """Decorator (``main`` returns the exit code instead of raising) or context manager (raises ``SystemExit`` with
    the exit code) that turns any exception but KeyboardInterrupt/SystemExit into one named line."""

    def __init__(self, prog: str) -> None:
        self.prog = prog

    def __call__(self, fn: Callable[..., Optional[int]]) -> Callable[..., Optional[int]]:
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 (the point of this helper)
                return report(self.prog, e)

        return wrapped

    def __enter__(self) -> "named_errors":
        return self

    def __exit__(self, kind, err, tb) -> bool:
        if err is None or not isinstance(err, Exception):
            return False
        raise SystemExit(report(self.prog, err)) from None
