"""``python -m pipeline.data`` (``make data``): the benchmark data, verified against ``data/manifest.yaml``.

    python -m pipeline.data                 # verify the data folder; fetch what is missing from its public source
    python -m pipeline.data --offline       # verify only (a mirror: TALENTRL_DATA_DIR, default ../shared/data)
    python -m pipeline.data --for experiment=demo   # only what a run with these Hydra overrides reads
    python -m pipeline.data --only tokenizer qa/eval # only these (``tokenizer``, folders or files of the manifest)
    python -m pipeline.data --write-manifest ../shared/data   # maintainers: rebuild the manifest from a mirror

Exit 0 when every file is there with its checksum, 1 otherwise (each problem named on stderr). A missing ``derived``
file is rebuilt from its pinned public sources (``talentrl_core.benchdata_derive``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Sequence

import yaml

from talentrl_core import benchdata, benchdata_fetch

SOURCE = re.compile(r"\*\*Source:\*\* ([\w.-]+/[\w.-]+)@([0-9a-f]{40})(.*)")
LICENCE = re.compile(r"\*\*Original dataset licence \(commonly cited\):\*\* (.*)")


# The data folders each environment family reads (an eval panel ``alfworld_valid_seen`` is family ``alfworld``).
ENV_FOLDERS = {"textworld": [], "alfworld": ["alfworld"], "qa": ["qa"], "webshop": ["webshop"]}


def needed_for(overrides: Sequence[str]) -> list[str]:
    """What a run composed with these Hydra overrides reads from the data folder: its env's and eval panels'
    folders, plus ``tokenizer`` (the files the tiny model's tokenizer is trained on) when ``model.kind=tiny``.

    >>> needed_for(["experiment=demo"])
    ['tokenizer']
    """
    from .config import load_config

    cfg = load_config(list(overrides))
    families = {str(cfg.env.name)} | {str(p).split("_")[0] for p in cfg.eval.panels}
    names = sorted({f for fam in families for f in ENV_FOLDERS.get(fam, [fam])})
    return names + ([benchdata.TOKENIZER] if str(cfg.model.kind) == "tiny" else [])


def wanted(only: Sequence[str] | None, for_run: Sequence[str] | None) -> list[benchdata.Entry]:
    """The manifest entries to verify and fetch: all, or those ``--only`` names, or those ``--for`` a run needs."""
    entries = benchdata.load_manifest()
    if only is None and for_run is None:
        return entries
    return benchdata.select(entries, [*(only or []), *(needed_for(for_run) if for_run is not None else [])])


def manifest_from_mirror(mirror: Path) -> list[dict]:
    """Entries for every file MANIFEST.md (the mirror's provenance record) describes, checksummed from the mirror."""
    rows, cur = [], None
    for line in (mirror / "MANIFEST.md").read_text().splitlines():
        if m := re.match(r"### `([^`]+)`", line):
            cur = {"path": m.group(1)}
            rows.append(cur)
        elif cur is not None and (m := SOURCE.search(line)):
            rest = m.group(3)
            paths = [p for p in re.findall(r"`([^`]+)`", rest) if "/" in p]
            folder = re.search(r"folder `([^`]+)`", rest)
            src = folder.group(1) if folder else paths[0]
            kind = "archive" if folder else ("file" if Path(src).suffix == Path(cur["path"]).suffix else "derived")
            cur.update(kind=kind, repo=m.group(1), revision=m.group(2), source_path=src,
                       how=rest.strip(" ,")[:400] if kind == "derived" else "")
        elif cur is not None and (m := LICENCE.search(line)):
            cur["licence"] = m.group(1).split(" (")[0].split(". ")[0][:120]
    out = []
    kept = {e.path: e.sources for e in benchdata.load_manifest()} if benchdata.MANIFEST.exists() else {}
    for r in rows:
        f = mirror / r["path"]
        out.append({**r, "sha256": benchdata.sha256(f), "size": f.stat().st_size, "licence": r.get("licence", "see MANIFEST.md")})
        if r.get("kind") == "derived" and kept.get(r["path"]):  # pinned source files: MANIFEST.md does not list them
            out[-1]["sources"] = [vars(s) for s in kept[r["path"]]]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.data", description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=None, help="data folder (default: $TALENTRL_DATA_DIR or ../shared/data)")
    p.add_argument("--offline", action="store_true", help="verify only; never download")
    p.add_argument("--write-manifest", type=Path, metavar="MIRROR", help="rebuild data/manifest.yaml from a mirror")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these: tokenizer, a folder (qa/eval) or a file")
    p.add_argument("--for", dest="for_run", nargs="+", metavar="OVERRIDE",
                   help="only what a run with these Hydra overrides reads (e.g. experiment=demo)")
    args = p.parse_args(argv)
    if args.write_manifest:
        rows = manifest_from_mirror(args.write_manifest)
        text = ("# Every benchmark data file: public source (repo@revision:path), sha256, size, licence.\n"
                "# Generated by `python -m pipeline.data --write-manifest <mirror>` from the mirror's MANIFEST.md.\n")
        benchdata.MANIFEST.write_text(text + yaml.safe_dump({"files": rows}, sort_keys=False, width=120))
        print(f"wrote {benchdata.MANIFEST} ({len(rows)} files)")
        return 0
    root = benchdata.data_dir(str(args.dir) if args.dir else None)
    entries = wanted(args.only, args.for_run)
    state = benchdata.status(root, entries)
    bad = []
    for e in entries:
        if state[e.path] != "ok" and not args.offline:
            try:
                benchdata_fetch.fetch(e, root)
                state[e.path] = "fetched"
            except Exception as ex:  # offline, derived, checksum: say which and why
                print(f"data: {e.path}: {state[e.path]}; fetching from {e.source} failed: {ex}", file=sys.stderr)
        if state[e.path] not in ("ok", "fetched"):
            bad.append(e)
            print(f"data: {e.path}: {state[e.path]} at {root / e.path} (source {e.source})", file=sys.stderr)
    if not args.quiet or bad:
        n_ok = sum(s == "ok" for s in state.values())
        n_new = sum(s == "fetched" for s in state.values())
        print(f"data: {root}: {n_ok} verified, {n_new} fetched, {len(bad)} missing or corrupt (of {len(entries)})",
              file=sys.stderr if bad else sys.stdout)
    return 1 if bad else 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line instead of a traceback (TALENTRL_TRACEBACK=1 shows it)

    sys.exit(named_errors("pipeline.data")(main)())
