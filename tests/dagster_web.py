"""Test helpers: ``dagster-webserver`` on a free loopback port for a temporary DAGSTER_HOME, and a minimal Chrome
DevTools Protocol client for headless Chromium (Debian's ``chromium``), so tests can use the UI as a person does."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def webserver(tmp: Path, env_extra: Optional[dict] = None, timeout: float = 180) -> Iterator[str]:
    """Start dagster-webserver (runs launched at once, no daemon); yields its URL; stops it and its children."""
    import httpx

    from pipeline.ui import descendants, reap

    home = tmp / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster.core.run_coordinator\n  class: DefaultRunCoordinator\n"
        "telemetry:\n  enabled: false\n")
    port = free_port()
    env = dict(os.environ, DAGSTER_HOME=str(home), **(env_extra or {}))
    log = tmp / "webserver.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1",
         "-p", str(port)], cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    try:
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.time() - t0 < timeout, f"webserver not ready in {timeout} s"
            try:
                if httpx.get(f"{url}/server_info", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        yield url
    finally:
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reap(children)


class Browser:
    """Headless Chromium driven over the DevTools protocol (navigate, evaluate JavaScript, screenshot)."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 900):
        import httpx
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file, t0 = profile / "DevToolsActivePort", time.time()
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None and time.time() - t0 < 60, "chromium did not start"
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        page = next(t for t in httpx.get(f"http://127.0.0.1:{port}/json", timeout=10).json() if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self.ids = itertools.count(1)

    def call(self, method: str, **params) -> dict:
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == i:
                assert "error" not in msg, msg["error"]
                return msg.get("result", {})

    def go(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def js(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")

    def wait_text(self, *needles: str, timeout: float = 120) -> str:
        t0 = time.time()
        while True:
            text = self.js("document.body ? document.body.innerText : ''") or ""
            if all(n in text for n in needles):
                return text
            assert time.time() - t0 < timeout, f"page never showed {needles}; it shows: {text[:1500]}"
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


STATUS = 'query Status($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }'


def wait_run(url: str, run_id: str, deadline: float) -> str:
    """The run's final status (SUCCESS, FAILURE or CANCELED), polled over GraphQL until ``deadline``."""
    import httpx

    status = None
    while status not in ("SUCCESS", "FAILURE", "CANCELED"):
        assert time.time() < deadline, f"run {run_id} still {status}"
        time.sleep(1)
        q = httpx.post(f"{url}/graphql", json={"query": STATUS, "variables": {"id": run_id}}, timeout=30).json()
        status = q["data"]["runOrError"]["status"]
    return status
