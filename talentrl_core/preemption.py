"""A stop asked from outside: a training stage that receives SIGTERM or SIGUSR1 checkpoints the step (SFT) or update
(RL) it is in and pauses, as at its time budget (``checkpoints.Paused``, exit 75); the same command resumes it.

SIGTERM is how a process is asked to end: ``kill``, ``timeout``, Kubernetes and Docker before SIGKILL, a machine
shutting down, Slurm at a job's time limit; SIGUSR1 is the notice Slurm sends ``--signal=USR1@<seconds>`` before it
(the convention of Lightning's auto-requeue). Without this a stop loses every step since the last checkpoint (up to
``sft.save_steps`` of them). A second signal acts as it would without the handler (by default the process ends at
once), so a stop that must not wait for a step is one more ``kill`` away. SIGINT (Ctrl-C) is left alone.

    with stop_signals("sft") as stop:
        for step in ...:
            ...
            if stop.name:
                save a checkpoint; raise Paused(...)

The contexts nest: inside an outer one (the ``rl`` stage around its two systems) an inner one shares its request, so
a signal that came during the last update of the first system stops the second after its first update.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterator, Optional

STOP_SIGNALS = ("SIGTERM", "SIGUSR1")
"The signals taken as a request to checkpoint and stop (those this platform has)."


def stop_reason(signal_name: Optional[str], late: bool, budget: str) -> str:
    """What ended a sitting, for its ``Paused`` line: the signal, else the spent budget (``budget``, e.g.
    ``sft.max_minutes=170``), else another process of a distributed run.

    >>> stop_reason(None, True, "rl.max_minutes=5"), stop_reason("SIGTERM", True, "x"), stop_reason(None, False, "x")
    ('rl.max_minutes=5', 'SIGTERM', 'a stop on another process')
    """
    return signal_name or (budget if late else "a stop on another process")


def budget_spent(max_minutes: float, t0: float) -> bool:
    """Whether a sitting begun at ``t0`` (``time.time()``) has spent its wall-clock budget of ``max_minutes`` (0: none).

    >>> budget_spent(0.5, time.time() - 60), budget_spent(0, 0.0), budget_spent(5, time.time())
    (True, False, False)
    """
    return bool(max_minutes) and time.time() - t0 > max_minutes * 60


def sitting_over(max_minutes: float, t0: float, request: "StopRequest", budget: str) -> Callable[[], str]:
    """A check of why the sitting is over, or "" while it goes on: a stop signal (``request``), or ``max_minutes``
    spent since ``t0`` (``budget``: the setting's name, for the ``Paused`` line). For a loop on one process; a
    distributed one votes on ``budget_spent`` first (``sft.sitting``, ``rl.run_files.past_budget``).

    >>> over = sitting_over(0.5, time.time() - 60, StopRequest(), "sft.max_minutes")
    >>> over(), sitting_over(0, 0.0, StopRequest(), "sft.max_minutes")()
    ('sft.max_minutes=0.5', '')
    """
    def why() -> str:
        late = budget_spent(max_minutes, t0)
        return stop_reason(request.name, late, f"{budget}={max_minutes:g}") if request.name or late else ""
    return why


class StopRequest:
    """``name``: the signal that asked this process to stop (``"SIGTERM"``), None while none has."""

    def __init__(self) -> None:
        self.name: Optional[str] = None


_ACTIVE: list[StopRequest] = []
"The request of the outermost ``stop_signals`` context open in this process (at most one)."


@contextlib.contextmanager
def stop_signals(stage: str) -> Iterator[StopRequest]:
    """While inside, the first of ``STOP_SIGNALS`` sets the yielded request's ``name`` (and says so on stderr, naming
    ``stage``); a second runs the handler that was there before. The handlers are restored on the way out. Inside an
    outer context the outer request is yielded and nothing is installed again; outside the main thread (where Python
    cannot install handlers) nothing is installed and the request stays empty."""
    if _ACTIVE or threading.current_thread() is not threading.main_thread():
        yield _ACTIVE[0] if _ACTIVE else StopRequest()
        return
    request = StopRequest()
    before: dict[int, object] = {}

    def handler(signum, frame):
        if request.name is None:
            request.name = signal.Signals(signum).name
            print(f"{stage}: {request.name} received: checkpointing the step in progress, then stopping "
                  f"(send it again to stop at once)", file=sys.stderr, flush=True)
            return
        previous = before[signum]
        signal.signal(signum, previous)
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signum)  # the default action (or none, where it was ignored)

    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous = signal.getsignal(sig)
            before[sig] = signal.SIG_DFL if previous is None else previous
            signal.signal(sig, handler)
    _ACTIVE.append(request)
    try:
        yield request
    finally:
        _ACTIVE.clear()
        for sig, previous in before.items():
            signal.signal(sig, previous)
