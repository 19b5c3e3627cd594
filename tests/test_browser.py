"""The Dagster UI as a person uses it, in headless Chromium: the five assets in their groups, and a click on
"Materialize" that runs a small materialisation of the demo experiment (its default). Needs Debian's ``chromium``
(``apt-get install chromium``); skipped without it. ``TALENTRL_SCREENSHOTS=<dir>`` keeps the screenshots."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.dagster_web import CHROMIUM, Browser, wait_run, webserver

ASSETS = ["trajectories", "library", "sft_checkpoint", "rl_checkpoint", "evaluation"]
RUNS = 'query { runsOrError { ... on Runs { results { runId status } } } }'
CLICK = """(() => { const b = [...document.querySelectorAll('button')].find(x => x.innerText.trim() === 'Materialize');
    if (b) { b.click(); return true } return false })()"""
SKIP = "[...document.querySelectorAll('button')].filter(x => x.innerText.trim() === 'Skip').forEach(x => x.click())"

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless test needs Debian's chromium (apt-get install chromium)")


def _keep(path: Path) -> None:
    if os.environ.get("TALENTRL_SCREENSHOTS"):
        dest = Path(os.environ["TALENTRL_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest / path.name)


def test_ui_shows_the_assets_and_materialises_the_demo_from_a_click(tmp_path, session_cache):
    import httpx

    overrides = (f"experiment=demo artifacts_dir={tmp_path / 'artifacts'} env.cache_dir={session_cache} "
                 "collect.n_episodes=2 tracker.mode=disabled")
    with webserver(tmp_path, {"TALENTRL_OVERRIDES": overrides}) as url:
        browser = Browser(tmp_path / "chromium")
        try:
            browser.go(f"{url}/assets")
            text = browser.wait_text(*ASSETS)
            browser.js(SKIP)
            for group in ("collection", "skill_library", "training", "evaluation"):
                assert group in text, text[:2000]
            _keep(browser.screenshot(tmp_path / "ui_assets.png"))

            browser.go(f"{url}/assets/trajectories")
            browser.wait_text("Materialize")
            runs: list = []
            for _ in range(3):  # the button can render before the page wires it: click again if nothing launched
                assert browser.js(CLICK), "no Materialize button"
                t0 = time.time()
                while not runs and time.time() - t0 < 20:
                    time.sleep(1)
                    runs = httpx.post(f"{url}/graphql", json={"query": RUNS}, timeout=30).json()["data"]["runsOrError"]["results"]
                if runs:
                    break
            assert runs, "three clicks on Materialize launched no run"
            run = runs[0]
            browser.js(SKIP)  # the newsletter dialog, if it shows
            assert wait_run(url, run["runId"], time.time() + 420) == "SUCCESS"
            browser.go(f"{url}/runs/{run['runId']}")
            browser.wait_text("Success", timeout=60)
            _keep(browser.screenshot(tmp_path / "ui_run.png"))
        finally:
            browser.close()
    # the run used the UI's default, the demo experiment (TALENTRL_OVERRIDES here adds a small episode count)
    assert list((tmp_path / "artifacts" / "trajectories").rglob("*.parquet"))
