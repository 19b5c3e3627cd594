"""``make ui``: the Dagster UI and daemon (``dagster dev``) on 127.0.0.1:3000 for this code location.

``dagster dev`` started from a shell background job ignores SIGTERM (ECOSYSTEM.md), so it is started
here in its own session with SIGINT/SIGTERM reset to their defaults; Ctrl-C (or SIGTERM to this
process) is forwarded as SIGINT, and if it has not stopped 30 s later its process group is killed.
DAGSTER_HOME defaults to ``.dagster_home`` in the project (telemetry off).

    python -m pipeline.ui [--host 127.0.0.1] [--port 3000]     # or TALENTRL_UI_PORT=3001 make ui

A port already in use is refused at start (exit 2, naming the port and how to pick another) rather than leaving
``dagster dev`` running with no web server.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from .env import ROOT, dagster_home, offline_defaults


def _default_signals() -> None:  # runs in the child before exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(host: str = "127.0.0.1", port: int = 3000, extra: Sequence[str] = ()) -> subprocess.Popen:
    """Start ``dagster dev`` in its own session; stop it with ``stop(proc)``."""
    offline_defaults()
    dagster_home()
    exe = Path(sys.executable).parent / "dagster"
    cmd = [str(exe), "dev", "-w", str(ROOT / "workspace.yaml"), "-h", host, "-p", str(port), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=os.environ.copy(), start_new_session=True, preexec_fn=_default_signals)


def descendants(pid: int) -> list:
    """Live descendant processes (dagster dev's webserver, daemon and code servers)."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def reap(children: list, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL, the given processes that outlived dagster dev (code servers in their
    own sessions otherwise linger until their heartbeat times out)."""
    import psutil

    alive = [c for c in children if c.is_running()]
    for c in alive:
        try:
            c.terminate()
        except psutil.NoSuchProcess:
            pass
    _, still = psutil.wait_procs(alive, timeout=timeout)
    for c in still:
        try:
            c.kill()
        except psutil.NoSuchProcess:
            pass


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> int:
    """SIGINT (dagster dev's clean shutdown), then SIGKILL to its process group; then reap leftovers."""
    children = descendants(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # own session: pgid == pid
            proc.wait()
    reap(children)
    return proc.returncode


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on (host, port) (we cannot bind it)."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.ui", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=int(os.environ.get("TALENTRL_UI_PORT", "3000")))
    args = p.parse_args(argv)
    if port_in_use(args.host, args.port):
        print(f"ui: port {args.port} on {args.host} is in use (another dagster dev?): stop it, or pick another port with "
              f"--port N or TALENTRL_UI_PORT=N", file=sys.stderr)
        return 2
    proc = start(args.host, args.port)
    print(f"dagster dev (pid {proc.pid}) → http://{args.host}:{args.port}  (Ctrl-C stops it)", flush=True)

    stopping: list[float] = []  # times of the signals received
    children: list = []

    def forward(signum, frame):
        stopping.append(time.monotonic())
        children.extend(descendants(proc.pid))
        if len(stopping) > 1:  # second Ctrl-C: no more waiting
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.poll() is None:
            proc.send_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        while proc.poll() is None:
            if stopping and time.monotonic() - stopping[0] > 30:
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            stop(proc)
        reap(children)
    return 0 if stopping else proc.returncode


if __name__ == "__main__":
    sys.exit(main())
