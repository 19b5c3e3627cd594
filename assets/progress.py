"""Progress inside long steps: while a stage runs, a heartbeat thread logs to the Dagster run every ``every``
seconds how long the step has run and what its progress bars (tqdm: episodes, SFT steps, RL updates) say."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator


def bar_lines() -> list[str]:
    """The text of every live tqdm bar in this process (e.g. ``sft: 40%|####  | 120/300 [02:10<03:15]``)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return []
    lines = []
    for bar in list(getattr(tqdm, "_instances", [])):
        try:
            d = bar.format_dict
            lines.append(f"{d.get('prefix') or 'progress'}: {d['n']}/{d['total'] or '?'} "
                         f"({d['elapsed']:.0f}s, {d['rate'] or 0:.2f}/s)")
        except Exception:  # a bar closing while we read it
            continue
    return lines


@contextlib.contextmanager
def heartbeat(log, stage: str, every: float = 60.0) -> Iterator[None]:
    """Log ``<stage>: running <m> min — <bars>`` every ``every`` seconds until the block ends."""
    stop = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not stop.wait(every):
            bars = "; ".join(bar_lines()) or "no progress bar open"
            log.info(f"{stage}: running {(time.monotonic() - t0) / 60:.1f} min — {bars}")

    thread = threading.Thread(target=beat, name=f"{stage}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
