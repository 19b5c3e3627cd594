"""A stop asked from outside (``talentrl_core/preemption.py``): the first SIGTERM / SIGUSR1 is recorded for the
training loop, a second acts as before, and the handlers are put back; the stages' use of it is tested beside their
time budgets (``test_sft.py``, ``test_rl_trainer.py``)."""

from __future__ import annotations

import os
import signal
import threading

from talentrl_core.preemption import stop_signals


def test_the_first_stop_signal_is_recorded_and_a_second_runs_the_handler_that_was_there(capsys):
    seen = []
    before = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        mine = signal.getsignal(signal.SIGUSR1)
        with stop_signals("sft") as stop:
            assert stop.name is None
            os.kill(os.getpid(), signal.SIGUSR1)
            assert stop.name == "SIGUSR1" and seen == []  # still alive: the loop decides when to stop
            os.kill(os.getpid(), signal.SIGUSR1)
            assert seen == [signal.SIGUSR1]
        assert signal.getsignal(signal.SIGUSR1) is mine
        assert "sft: SIGUSR1 received: checkpointing the step in progress" in capsys.readouterr().err
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_handlers_are_put_back_and_nothing_is_installed_off_the_main_thread():
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals("rl") as stop:
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before and stop.name is None
    got = {}

    def off_main():
        with stop_signals("rl") as s:
            got["handler"], got["name"] = signal.getsignal(signal.SIGTERM), s.name

    t = threading.Thread(target=off_main)
    t.start(), t.join()
    assert got == {"handler": before, "name": None}


def test_nested_contexts_share_the_outer_request():
    """The rl stage holds one request around both systems: a signal in the first system's loop still stops the
    second's."""
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals("rl") as outer:
        installed = signal.getsignal(signal.SIGTERM)
        with stop_signals("rl") as first:
            assert first is outer and signal.getsignal(signal.SIGTERM) is installed
            os.kill(os.getpid(), signal.SIGTERM)
        with stop_signals("rl_flat_grpo") as second:
            assert second is outer and second.name == "SIGTERM"
        assert signal.getsignal(signal.SIGTERM) is installed
    assert signal.getsignal(signal.SIGTERM) is before
    with stop_signals("sft") as fresh:
        assert fresh is not outer and fresh.name is None
