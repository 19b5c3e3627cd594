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
import urllib.error
from pathlib import Path

import pytest

from talentrl_core import benchdata, benchdata_fetch
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
        out = benchdata_fetch.fetch(e, tmp_path / "data", raw_url=url)
        assert benchdata.sha256(out) == e.sha256
        src.write_text("tampered\n")
        with pytest.raises(benchdata.DataCorrupt, match="bamboogle.jsonl.*sha256"):
            benchdata_fetch.fetch(e, tmp_path / "data2", raw_url=url)
        assert not (tmp_path / "data2" / e.path).exists() and not list((tmp_path / "data2" / "qa" / "eval").iterdir())
        derived = next(x for x in benchdata.load_manifest() if x.kind == "derived")
        with pytest.raises(urllib.error.HTTPError, match="404"):  # its pinned sources are fetched (here: absent)
            benchdata_fetch.fetch(derived, tmp_path / "data3", raw_url=url)
    finally:
        server.shutdown()


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


def _tokenizer_files(src: Path, dest: Path) -> Path:
    for e in benchdata.tokenizer_entries():
        (dest / e.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / e.path, dest / e.path)
    return dest


def test_tokenizer_corpus_is_the_manifest_files_verified(tmp_path, shared_data):
    entries = benchdata.tokenizer_entries()
    assert len(entries) == 13 and entries[0].path == "alfworld/alfred.twl2"
    assert {e.path.split("/")[0] for e in entries} == {"alfworld", "trajectories", "qa"}
    data = _tokenizer_files(shared_data, tmp_path / "data")
    (data / "qa" / "eval" / "extra.jsonl").write_text('{"question": "an unlisted file is never read"}\n')
    corpus = tokenizer_corpus(data)
    assert corpus == tokenizer_corpus(shared_data) and len(corpus) == 13131
    assert "an unlisted file is never read" not in corpus


def test_tokenizer_refuses_a_data_dir_missing_a_file_or_with_a_corrupt_one(tmp_path, shared_data):
    data = _tokenizer_files(shared_data, tmp_path / "data")
    (data / "qa" / "train" / "stage_2.jsonl").unlink()
    with pytest.raises(benchdata.DataMissing, match=r"12 verified; missing: qa/train/stage_2.jsonl\. Run `make data`"):
        tokenizer_corpus(data)
    for f in (data / "qa" / "eval").iterdir():  # the old guard passed any data dir with a qa/ folder
        f.unlink()
    with pytest.raises(benchdata.DataMissing, match="missing: qa/eval/2wiki_500.jsonl, .*qa/train/stage_2.jsonl"):
        tokenizer_corpus(data)
    data = _tokenizer_files(shared_data, tmp_path / "data2")
    with open(data / "trajectories" / "alfworld_3prompts.json", "r+b") as f:
        f.write(b"X")  # same size, one byte changed
    with pytest.raises(benchdata.DataCorrupt, match=r"wrong sha256 .*: trajectories/alfworld_3prompts.json\. Run `make data`"):
        tokenizer_corpus(data)


def test_make_data_for_an_experiment_checks_only_what_it_reads(tmp_path, shared_data):
    from pipeline.data import needed_for

    assert needed_for(["experiment=demo"]) == ["tokenizer"]
    assert needed_for(["experiment=webshop"]) == ["webshop", "tokenizer"]
    assert needed_for(["experiment=gpu"]) == ["alfworld"]
    data = _tokenizer_files(shared_data, tmp_path / "data")
    run = lambda *a: subprocess.run([sys.executable, "-m", "pipeline.data", "--offline", "--dir", str(data), *a],  # noqa: E731
                                    cwd=ROOT, capture_output=True, text=True)
    proc = run("--for", "experiment=demo")
    assert proc.returncode == 0 and "13 verified, 0 fetched, 0 missing or corrupt (of 13)" in proc.stdout, proc.stderr
    proc = run("--only", "qa/train", "trajectories")
    assert proc.returncode == 0 and "(of 5)" in proc.stdout, proc.stderr
    proc = run()
    assert proc.returncode == 1 and "16 missing or corrupt (of 29)" in proc.stderr
    assert "webshop/minimal_documents_1000.jsonl: missing" in proc.stderr
    proc = run("--only", "nothing/here")
    assert proc.returncode == 1 and "no data file matches 'nothing/here'" in proc.stderr
