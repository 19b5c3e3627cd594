"""How ``Library.commit`` writes one library version (store.py's module docstring has the model).

1. ``checked_rows``: copies of the env's new rows, their links checked (unique skill ids, talents linking known
   skills, labels naming known talents) and their missing vectors embedded;
2. ``stamp_versions``: a row keeps its old ``library_version`` when its content did not change;
3. ``write_tables``: the env's rows replace its old ones (other envs carried over), each table is overwritten (a new
   LanceDB table version), and the manifest row mapping the new library version to those table versions is appended
   last: the commit point.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from . import integrity
from .embed import TextEncoder
from .integrity import MANIFEST
from .schema import VERSIONS_SCHEMA, labels_to_arrow, skills_to_arrow, talents_to_arrow

log = logging.getLogger(__name__)

TABLES = ("skills", "talents", "labels")


def check_links(env: str, skills, talents, labels) -> None:
    ids = {s.skill_id for s in skills}
    if len(ids) != len(skills):
        dup = [k for k, n in Counter(s.skill_id for s in skills).items() if n > 1]
        raise ValueError(f"duplicate skill ids {dup[:5]}")
    tids = {t.talent_id for t in talents}
    for rec in list(skills) + list(talents) + list(labels):
        if rec.env != env:
            raise ValueError(f"commit for env {env!r} got a row of env {rec.env!r}")
    for t in talents:
        bad = [s for s in t.skill_ids if s not in ids]
        if bad:
            raise ValueError(f"talent {t.talent_id} links unknown skills {bad[:5]}")
    bad_labels = sorted({l.talent_id for l in labels} - tids)
    if bad_labels:
        raise ValueError(f"labels name unknown talents {bad_labels[:5]}")


def fill_vectors(enc: TextEncoder, records) -> None:
    todo = [r for r in records if r.vector is None]
    if todo:
        vecs = enc.encode([r.text() for r in todo])
        for r, v in zip(todo, vecs):
            r.vector = [float(x) for x in v]


def checked_rows(env: str, enc: TextEncoder, skills, talents, labels) -> tuple[list, list, list]:
    """Copies of the rows (versions and vectors are set on them), links checked, vectors filled."""
    skills, talents, labels = [replace(s) for s in skills], [replace(t) for t in talents], [replace(l) for l in labels]
    check_links(env, skills, talents, labels)
    fill_vectors(enc, skills)
    fill_vectors(enc, talents)
    return skills, talents, labels


def stamp_versions(latest, env: str, new_version: int, skills, talents, labels) -> None:
    """Each row's ``library_version``: its old one when its content did not change, else ``new_version``."""
    keys = (
        (skills, {s.skill_id: s for s in latest.skills(env)}, lambda r: r.skill_id),
        (talents, {t.talent_id: t for t in latest.talents(env)}, lambda r: r.talent_id),
        (labels, {(l.kind, l.task_type, l.traj_uid, l.task_id): l for l in latest.labels(env)},
         lambda r: (r.kind, r.task_type, r.traj_uid, r.task_id)),
    )
    for rows, previous, key in keys:
        for r in rows:
            old = previous.get(key(r))
            r.library_version = old.library_version if old and old.content() == r.content() else new_version


def merged_tables(latest, env: str, dim: int, skills, talents, labels) -> dict[str, pa.Table]:
    """The three tables of the new version: ``env``'s new rows, every other env's rows as they were."""
    all_s = sorted([s for s in latest.skills() if s.env != env] + skills, key=lambda s: (s.env, s.skill_id))
    all_t = sorted([t for t in latest.talents() if t.env != env] + talents, key=lambda t: (t.env, t.talent_id))
    all_l = sorted([l for l in latest.labels() if l.env != env] + labels,
                   key=lambda l: (l.env, l.kind, l.task_type, l.traj_uid, l.task_id))
    return {"skills": skills_to_arrow(all_s, dim), "talents": talents_to_arrow(all_t, dim), "labels": labels_to_arrow(all_l)}


def write_tables(db, uri: str, existing: set[str], data: dict[str, pa.Table], row: dict) -> dict:
    """Overwrite (or create) each table, then append the manifest ``row`` with their table versions: the commit
    point. Tables a killed first commit left uncommitted are cleared first (``integrity.state`` "interrupted")."""
    if integrity.state(uri) == "interrupted":  # a killed first commit: its tables were never visible
        for name in [n for n in existing if integrity.uncommitted(uri, n)]:
            log.info("library %s: removed %s.lance, left uncommitted by a first commit that was interrupted", uri, name)
            shutil.rmtree(Path(uri) / f"{name}.lance")
            existing.discard(name)
    for name in TABLES:
        if name in existing:
            t = db.open_table(name)
            t.add(data[name], mode="overwrite")
        else:
            t = db.create_table(name, data[name])
        row[f"{name}_table_version"] = int(t.version)
    row["created_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    mt = pa.Table.from_pylist([row], schema=VERSIONS_SCHEMA)
    if MANIFEST in existing:
        db.open_table(MANIFEST).add(mt)
    else:
        db.create_table(MANIFEST, mt)
    return row
