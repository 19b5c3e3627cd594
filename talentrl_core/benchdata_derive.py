"""The converters of the manifest's ``derived`` entries: each rebuilds its file from public source files (pinned by
revision and sha256 in ``data/manifest.yaml``) exactly as the entry's ``how`` describes, with the standard library.

* ``qa/context/hotpotqa_dev_distractor_100.jsonl``: reflexion's ``hotpot-qa-distractor-sample.joblib`` (a pandas
  DataFrame, 100 rows x 7 object columns) read by a restricted unpickler (``joblib_frame``: nothing in the file is
  ever called), one JSON object per row, columns in their order, arrays as lists, ``ensure_ascii=False``.
* ``webshop/minimal_documents_1000.jsonl``: the stored ``raw`` field of the 1,000 documents of webshop-minimal's
  Lucene 9.5 index (``_1.fnm``, ``_1.fdm``, ``_1.fdt``, ``_1.fdx``; ``lucene_stored``), in document order. Lucene
  stores ``raw`` pretty-printed, so each line is that JSON re-serialised on one line
  (``json.dumps(json.loads(raw), ensure_ascii=False)``).

Both reproduce the mirror's files byte for byte (same sha256 as the manifest). ``benchdata_fetch.fetch`` calls ``derive``
when a derived file is missing; ``python -m talentrl_core.benchdata_derive SRC_DIR OUT`` converts local copies.
"""

from __future__ import annotations

import hashlib
import json
import sys
import urllib.request
from pathlib import Path
from typing import Callable, Mapping

from . import joblib_frame, lucene_stored
from .benchdata import RAW_URL, DataCorrupt, DataMissing, Entry, load_manifest


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def hotpotqa_from_joblib(sources: Mapping[str, bytes]) -> bytes:
    (data,) = sources.values()
    return _jsonl(joblib_frame.rows(joblib_frame.load(data)))


def webshop_from_lucene(sources: Mapping[str, bytes]) -> bytes:
    by_ext = {Path(p).suffix: d for p, d in sources.items()}
    docs = lucene_stored.stored_documents(by_ext[".fnm"], by_ext[".fdm"], by_ext[".fdt"])
    return _jsonl(json.loads(str(d["raw"])) for d in docs)


CONVERTERS: dict[str, Callable[[Mapping[str, bytes]], bytes]] = {
    "qa/context/hotpotqa_dev_distractor_100.jsonl": hotpotqa_from_joblib,
    "webshop/minimal_documents_1000.jsonl": webshop_from_lucene,
}


def fetch_sources(e: Entry, raw_url: str = RAW_URL, timeout: float = 60) -> dict[str, bytes]:
    """Each source file of ``e`` from its public repository at the pinned revision, verified by sha256."""
    if not e.sources:
        raise DataMissing(f"{e.path} is derived but data/manifest.yaml lists no sources for it")
    out = {}
    for s in e.sources:
        url = raw_url.format(repo=e.repo, revision=e.revision, path=s.path)
        with urllib.request.urlopen(url, timeout=timeout) as r:
            out[s.path] = _checked(e, s.path, s.sha256, r.read())
    return out


def _checked(e: Entry, path: str, sha: str, data: bytes) -> bytes:
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        raise DataCorrupt(f"{e.path}: source {e.repo}@{e.revision[:12]}:{path} has sha256 {got}, the manifest says {sha}")
    return data


def convert(e: Entry, sources: Mapping[str, bytes]) -> bytes:
    """The derived file's bytes from its verified sources, checked against the manifest's sha256."""
    try:
        conv = CONVERTERS[e.path]
    except KeyError:
        raise DataMissing(f"{e.path} is derived ({e.how}) and no converter ships for it: copy it from a mirror "
                          f"(TALENTRL_DATA_DIR)") from None
    data = conv(sources)
    got = hashlib.sha256(data).hexdigest()
    if got != e.sha256:
        raise DataCorrupt(f"{e.path}: converted from {e.source} but its sha256 is {got}, the manifest says {e.sha256}")
    return data


def derive(e: Entry, out: Path, raw_url: str = RAW_URL, timeout: float = 60) -> Path:
    """Fetch ``e``'s sources, convert and write the verified result to ``out``."""
    out.write_bytes(convert(e, fetch_sources(e, raw_url, timeout)))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m talentrl_core.benchdata_derive SRC_DIR OUT_DIR``: convert every derived entry whose source files
    lie under ``SRC_DIR/<repo>/<revision>/<path>`` (the raw-file layout), verified, into ``OUT_DIR/<path>``."""
    src, dest = (Path(a) for a in (argv if argv is not None else sys.argv[1:]))
    for e in (x for x in load_manifest() if x.kind == "derived"):
        files = {s.path: _checked(e, s.path, s.sha256, (src / e.repo / e.revision / s.path).read_bytes())
                 for s in e.sources}
        target = dest / e.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(convert(e, files))
        print(f"{e.path}: {target.stat().st_size} bytes, sha256 {e.sha256} (as the manifest)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
