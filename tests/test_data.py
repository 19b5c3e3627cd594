"""The benchmark data: a manifest with source, revision, checksum and licence for every file; `make data` verifies
a mirror and fetches what is missing (here from a loopback server standing in for the public source); missing
data is an error naming the dataset and `make data`; a CI run without data fails instead of skipping."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from talentrl_core import benchdata
from talentrl_core.envs.qa import QADataError, iter_records
from talentrl_core.models import tokenizer_corpus

ROOT = Path(__file__).resolve().parent.parent


def test_manifest_names_source_revision_checksum_licence_for_every_mirror_file(shared_data):
    entries = benchdata.load_manifest()
    assert len(entries) >= 29 and len({e.path for e in entries}) == len(entries)
    for e in entries:
        assert "/" in e.repo and len(e.revision) == 40 and len(e.sha256) == 64 and e.licence and e.source_path
        assert e.kind in ("file", "archive", "derived") and (e.kind != "derived" or e.how)
    assert set(benchdata.status(shared_data, entries).values()) == {"ok"}
    on_disk = {p.relative_to(shared_data).as_posix() for p in shared_data.rglob("*") if p.is_file()}
    unlisted = {p for p in on_disk if not p.startswith("licenses/") and p not in ("MANIFEST.md", "README.md")}
    assert unlisted == {e.path for e in entries}


def _serve(directory: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_fetch_verifies_checksums_and_writes_atomically(tmp_path, shared_data):
    e = next(x for x in benchdata.load_manifest() if x.path == "qa/eval/bamboogle.jsonl")
    src = tmp_path / "github" / e.repo / e.revision / e.source_path  # the raw-file layout of the public source
    src.parent.mkdir(parents=True)
    shutil.copy(shared_data / e.path, src)
    server = _serve(tmp_path / "github")
    url = f"http://127.0.0.1:{server.server_address[1]}/{{repo}}/{{revision}}/{{path}}"
    try:
        out = benchdata.fetch(e, tmp_path / "data", raw_url=url)
        assert benchdata.sha256(out) == e.sha256
        src.write_text("tampered\n")
        with pytest.raises(benchdata.DataCorrupt, match="bamboogle.jsonl.*sha256"):
            benchdata.fetch(e, tmp_path / "data2", raw_url=url)
        assert not (tmp_path / "data2" / e.path).exists() and not list((tmp_path / "data2" / "qa" / "eval").iterdir())
    finally:
        server.shutdown()
    derived = next(x for x in benchdata.load_manifest() if x.kind == "derived")
    with pytest.raises(benchdata.DataMissing, match="derived"):
        benchdata.fetch(derived, tmp_path / "data3")


def test_make_data_offline_reports_missing_and_corrupt_files(tmp_path, shared_data):
    mirror = tmp_path / "mirror"
    shutil.copytree(shared_data, mirror)
    os.chmod(mirror / "qa" / "eval", 0o755)
    (mirror / "qa" / "eval" / "nq_1000.jsonl").chmod(0o644)
    (mirror / "qa" / "eval" / "nq_1000.jsonl").write_text("{}\n")
    (mirror / "qa" / "eval" / "popqa_1000.jsonl").chmod(0o644)
    (mirror / "qa" / "eval" / "popqa_1000.jsonl").unlink()
    proc = subprocess.run([sys.executable, "-m", "pipeline.data", "--offline", "--dir", str(mirror)], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "qa/eval/nq_1000.jsonl: corrupt" in proc.stderr and "qa/eval/popqa_1000.jsonl: missing" in proc.stderr
    assert "27 verified, 0 fetched, 2 missing or corrupt" in proc.stderr


def test_missing_data_is_named_with_make_data(tmp_path):
    with pytest.raises(benchdata.DataMissing, match="make data"):
        tokenizer_corpus(tmp_path)
    with pytest.raises(QADataError, match=r"dataset qa/eval/nq_1000.jsonl \(from GaurisankarJ/reason_over_search@.*make data"):
        list(iter_records(tmp_path / "qa" / "eval" / "nq_1000.jsonl"))


def test_a_ci_run_without_data_fails_naming_make_data(tmp_path):
    env = dict(os.environ, CI="true", TALENTRL_DATA_DIR=str(tmp_path / "nowhere"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_data.py::test_manifest_names_source_revision_checksum_licence_for_every_mirror_file"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "make data" in proc.stdout and "1 error" in proc.stdout, proc.stdout[-2000:]
    env["CI"] = ""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_data.py::test_manifest_names_source_revision_checksum_licence_for_every_mirror_file"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "1 skipped" in proc.stdout and "make data" in proc.stdout
