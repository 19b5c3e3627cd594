"""The versioned skill/talent library on LanceDB (DESIGN.md §3).

``Library.open(uri, version)`` reads one *library version*: our own integer, 1, 2, 3... increasing by one
with every write. A write (``commit``) replaces one env's rows of ``skills``, ``talents`` and ``labels``
(other envs are carried over), overwrites each table — which makes a new LanceDB table version — and then
appends one row to the ``versions`` manifest mapping the new library version to those table versions.
The manifest row is the commit point: a crash before it leaves the previous version intact, and reading
version N after N+1 was written checks the tables out at N's table versions and returns N's rows.

The uri is any LanceDB uri: a local folder (embedded, the default) or object storage (``s3://...``).
A ``Library`` object is pinned: it keeps serving the version it opened until it writes (then it moves to
the version it wrote) or ``refresh()`` is called.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Optional, Sequence

import lancedb
import numpy as np
import pyarrow as pa

from ..config import LibraryConfig
from . import integrity
from .commit import TABLES, checked_rows, merged_tables, stamp_versions, write_tables
from .embed import TextEncoder, embedder_for
from .integrity import MANIFEST, LibraryDamagedError, LibraryReadError, commit_lock
from .retrieval import RetrievalResult, SkillIndex
from .schema import LabelRecord, SkillRecord, TalentRecord, labels_from_arrow, skills_from_arrow, talents_from_arrow

log = logging.getLogger(__name__)



@contextlib.contextmanager
def _named_table_errors(uri: str, table: str):
    try:
        yield
    except (LibraryVersionError, LibraryReadError):
        raise
    except Exception as e:  # noqa: BLE001 - lance raises OSError, RuntimeError, ValueError... for damaged files
        raise LibraryReadError(
            f"{Path(uri) / (table + '.lance')}: library table {table!r} of {uri} cannot be read ({type(e).__name__}: "
            f"{str(e)[:300]}); nothing was changed. Restore the folder (`dvc checkout artifacts/library`) or re-run "
            f"the distill stage, which moves it aside to {uri}.damaged-<UTC time> and starts at version 1") from e


_QUERY_CACHE_SIZE = 20000


class LibraryVersionError(ValueError):
    """A requested library version does not exist (the message lists the ones that do)."""


def _table_names(db) -> set[str]:
    names: set[str] = set()
    token = None
    while True:
        resp = db.list_tables(page_token=token) if token else db.list_tables()
        names.update(resp.tables)
        token = getattr(resp, "page_token", None)
        if not token:
            return names


class Library:
    """One pinned version of a skill/talent library. Reads are in memory; writes make a new version."""

    def __init__(self, db, uri: str, cfg: LibraryConfig, embedder: Optional[TextEncoder], manifest_row: Optional[dict]):
        self._db = db
        self.uri = uri
        self.cfg = cfg
        self._embedder = embedder
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._load(manifest_row)

    # ------------------------------------------------------------------ open / load

    @classmethod
    def open(
        cls,
        uri: str | Path | None = None,
        version: Optional[int] = None,
        *,
        cfg: Optional[LibraryConfig] = None,
        embedder: Optional[TextEncoder] = None,
    ) -> "Library":
        """Open ``uri`` (default ``cfg.uri``) at library ``version`` (default ``cfg.version``; -1 = latest).

        An empty or new uri opens as version 0 with no rows. ``embedder`` defaults to ``cfg.embedder``
        (loaded on first use); it must be the model the library was written with.
        """
        cfg = cfg or LibraryConfig()
        uri = str(uri if uri is not None else cfg.uri)
        version = cfg.version if version is None else int(version)
        folder_state = integrity.state(uri)
        if folder_state == "damaged":
            raise LibraryDamagedError(integrity.damage_message(uri))
        with _named_table_errors(uri, MANIFEST):
            db = lancedb.connect(uri)
            manifest = cls._manifest_rows(db) if folder_state == "committed" else []
        row = None
        if version == -1:
            row = manifest[-1] if manifest else None
        elif version == 0:
            row = None
        else:
            found = [r for r in manifest if r["library_version"] == version]
            if not found:
                raise LibraryVersionError(
                    f"{uri}: library version {version} does not exist; versions: {[r['library_version'] for r in manifest] or 'none'}"
                )
            row = found[0]
        return cls(db, uri, cfg, embedder, row)

    @staticmethod
    def _manifest_rows(db) -> list[dict]:
        if MANIFEST not in _table_names(db):
            return []
        rows = db.open_table(MANIFEST).to_arrow().to_pylist()
        return sorted(rows, key=lambda r: r["library_version"])

    def _load(self, row: Optional[dict]) -> None:
        self._manifest_row = row
        self.version: int = int(row["library_version"]) if row else 0
        "The pinned library version (0: empty)."
        self.dim: Optional[int] = int(row["dim"]) if row else None
        self.embedder_name: Optional[str] = row["embedder"] if row else None
        tables: dict[str, Optional[pa.Table]] = {n: None for n in TABLES}
        if row:
            for name in TABLES:
                with _named_table_errors(self.uri, name):
                    t = self._db.open_table(name)
                    t.checkout(int(row[f"{name}_table_version"]))
                    tables[name] = t.to_arrow()
        self._skills = skills_from_arrow(tables["skills"])
        self._talents = talents_from_arrow(tables["talents"])
        self._labels = labels_from_arrow(tables["labels"])
        self._skill_by_id = {s.skill_id: s for s in self._skills}
        self._talent_by_id = {t.talent_id: t for t in self._talents}
        self._label_by_traj = {l.traj_uid: l for l in self._labels if l.kind == "traj" and l.traj_uid}
        by_task: dict[str, Counter] = {}
        for l in self._labels:
            if l.kind == "traj" and l.task_id:
                by_task.setdefault(l.task_id, Counter())[l.talent_id] += 1
        self._label_by_task = {k: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for k, c in by_task.items()}
        self._oracle = {(l.env, l.task_type): l.talent_id for l in self._labels if l.kind == "oracle"}
        self._index: dict[str, SkillIndex] = {}

    def refresh(self, version: int = -1) -> "Library":
        """Re-pin this object to ``version`` (-1: the latest)."""
        fresh = Library.open(self.uri, version, cfg=self.cfg, embedder=self._embedder)
        self._load(fresh._manifest_row)
        return self

    def versions(self) -> list[dict]:
        """The manifest: one dict per library version (library_version, table versions, note, embedder...)."""
        return self._manifest_rows(self._db)

    @property
    def latest_version(self) -> int:
        rows = self.versions()
        return int(rows[-1]["library_version"]) if rows else 0

    # ------------------------------------------------------------------ embedder

    @property
    def embedder(self) -> TextEncoder:
        if self._embedder is None:
            self._embedder = embedder_for(self.cfg, self.uri)
        if self.embedder_name is not None and self._embedder.name != self.embedder_name:
            raise ValueError(
                f"{self.uri} v{self.version} was embedded with {self.embedder_name!r} but the embedder is "
                f"{self._embedder.name!r}: set library.embedder to {self.embedder_name!r} or distil a new library"
            )
        return self._embedder

    def embed_query(self, text: str) -> np.ndarray:
        """The query vector, cached by text in memory (per-step retrieval repeats observations)."""
        v = self._query_cache.get(text)
        if v is None:
            v = self.embedder.encode([text], cache=False)[0]
            self._query_cache[text] = v
            if len(self._query_cache) > _QUERY_CACHE_SIZE:
                self._query_cache.popitem(last=False)
        else:
            self._query_cache.move_to_end(text)
        return v

    # ------------------------------------------------------------------ reads

    def envs(self) -> list[str]:
        return sorted({s.env for s in self._skills} | {t.env for t in self._talents})

    def skills(self, env: Optional[str] = None, kind: Optional[str] = None, task_type: Optional[str] = None) -> list[SkillRecord]:
        """Skills sorted by id, optionally of one env / kind / task type."""
        out = [
            s for s in self._skills
            if (env is None or s.env == env) and (kind is None or s.kind == kind) and (task_type is None or task_type in s.task_types)
        ]
        return sorted(out, key=lambda s: s.skill_id)

    def talents(self, env: Optional[str] = None) -> list[TalentRecord]:
        return sorted((t for t in self._talents if env is None or t.env == env), key=lambda t: t.talent_id)

    def labels(self, env: Optional[str] = None) -> list[LabelRecord]:
        return [l for l in self._labels if env is None or l.env == env]

    def strategy_talents(self, env: str) -> dict[str, str]:
        """Strategy expert → the talent distilled from it (the ``kind='matrix'`` labels; empty in a library whose
        trajectories carried no strategy)."""
        return {l.strategy: l.talent_id for l in self.labels(env) if l.kind == "matrix" and l.strategy}

    def skill(self, skill_id: str) -> SkillRecord:
        return self._skill_by_id[skill_id]

    def talent(self, talent_id: str) -> TalentRecord:
        return self._talent_by_id[talent_id]

    def label_for(self, key) -> Optional[str]:
        """The routing label of a trajectory: by ``traj_uid``, else the majority label of its ``task_id``.

        ``key`` is a traj_uid, a task_id, or any object with ``traj_uid`` / ``task_id`` attributes (a Trajectory).
        """
        if isinstance(key, str):
            uid, task = key, key
        else:
            uid, task = getattr(key, "traj_uid", ""), getattr(key, "task_id", "")
        lab = self._label_by_traj.get(uid)
        if lab is not None:
            return lab.talent_id
        return self._label_by_task.get(task)

    def oracle_talent(self, env: str, task_type: str) -> Optional[str]:
        """The talent most of the task type's successful trajectories followed (None when unknown)."""
        return self._oracle.get((env, task_type))

    def _env_index(self, env: str) -> SkillIndex:
        idx = self._index.get(env)
        if idx is None:
            idx = SkillIndex(self.skills(env), self.talents(env), self.dim or 0)
            self._index[env] = idx
        return idx

    def _default_env(self, env: Optional[str]) -> str:
        if env is not None:
            return env
        envs = self.envs()
        if len(envs) != 1:
            raise ValueError(f"retrieve needs env= when the library holds {len(envs)} envs ({envs})")
        return envs[0]

    def retrieve(
        self,
        query_text: str,
        talent_id: Optional[str] = None,
        lam: Optional[float] = None,
        delta: Optional[float] = None,
        k_specific: Optional[int] = None,
        k_general: Optional[int] = None,
        k_mistake: Optional[int] = None,
        env: Optional[str] = None,
        task_type: Optional[str] = None,
    ) -> RetrievalResult:
        """Skills for ``query_text`` under ``talent_id`` (retrieval.py has the formula); None → ``self.cfg``.

        ``task_type`` (optional) restricts specific skills and mistakes to that task type.
        """
        env = self._default_env(env)
        lam = self.cfg.lam if lam is None else float(lam)
        delta = self.cfg.delta if delta is None else float(delta)
        k = {
            "specific": self.cfg.k_specific if k_specific is None else k_specific,
            "general": self.cfg.k_general if k_general is None else k_general,
            "mistake": self.cfg.k_mistake if k_mistake is None else k_mistake,
        }
        idx = self._env_index(env)
        if not idx.ids:
            return RetrievalResult([], talent_id, lam, delta, self.version)
        skills = idx.search(self.embed_query(query_text), talent_id, lam, delta, k, task_type)
        return RetrievalResult(skills, talent_id, lam, delta, self.version)

    def nearest_talent(self, env: str, text: str) -> Optional[str]:
        """The talent whose embedding is closest to ``text`` (routing fallback for an unknown id, DESIGN §4)."""
        ts = self.talents(env)
        if not ts:
            return None
        q = self.embed_query(text)
        m = np.asarray([t.vector for t in ts], dtype=np.float32)
        cos = m @ q
        best = np.lexsort((np.arange(len(ts)), -cos))[0]
        return ts[int(best)].talent_id

    # ------------------------------------------------------------------ writes

    def commit(
        self,
        env: str,
        skills: Sequence[SkillRecord],
        talents: Sequence[TalentRecord],
        labels: Sequence[LabelRecord],
        *,
        note: str = "",
    ) -> int:
        """Replace ``env``'s rows with these (other envs carried over) as a new library version; returns it.

        Writes start from the *latest* version, whatever this object is pinned to, and afterwards this object
        is pinned to the version it wrote. Missing vectors are embedded. A row keeps its old
        ``library_version`` when its content did not change. Commits to a local library hold a file lock
        (``<uri>/.commit.lock``): two processes committing at once get consecutive versions.
        """
        with commit_lock(self.uri):
            latest = Library._latest_intact(self.uri, self.cfg, self._embedder)
            self._db = latest._db  # a new connection when a damaged folder was moved aside
            with integrity.first_commit(self.uri, latest.version == 0):
                return self._commit(latest, env, skills, talents, labels, note=note)

    @classmethod
    def for_writing(cls, uri: str | Path | None = None, *, cfg: Optional[LibraryConfig] = None,
                    embedder: Optional[TextEncoder] = None) -> "Library":
        """The latest version, to commit on top of (what distill opens). Unlike ``open`` it never refuses a damaged
        library: that moves aside first (``_latest_intact``)."""
        cfg = cfg or LibraryConfig()
        uri = str(uri if uri is not None else cfg.uri)
        with commit_lock(uri):
            return cls._latest_intact(uri, cfg, embedder)

    @classmethod
    def _latest_intact(cls, uri: str, cfg: LibraryConfig, embedder: Optional[TextEncoder]) -> "Library":
        """The latest version to write on top of. A damaged library (its history gone, or a table that cannot be
        read) is never written over: its contents move aside (``integrity.move_aside``) and a new history starts."""
        try:
            return cls.open(uri, -1, cfg=cfg, embedder=embedder)
        except LibraryReadError as e:
            if not integrity.is_local(uri) or isinstance(e.__cause__, PermissionError):
                raise
            integrity.move_aside(uri, "its version history is gone" if isinstance(e, LibraryDamagedError)
                                 else str(e).split(";")[0])
            return cls.open(uri, -1, cfg=cfg, embedder=embedder)

    def _commit(self, latest: "Library", env, skills, talents, labels, *, note: str = "") -> int:
        enc = self.embedder
        skills, talents, labels = checked_rows(env, enc, skills, talents, labels)
        dim = enc.dim
        if latest.dim is not None and latest.dim != dim:
            raise ValueError(f"{self.uri} holds {latest.dim}-d vectors ({latest.embedder_name}); this embedder gives {dim}-d")
        new_version = latest.version + 1
        stamp_versions(latest, env, new_version, skills, talents, labels)
        data = merged_tables(latest, env, dim, skills, talents, labels)
        row = write_tables(self._db, self.uri, _table_names(self._db), data,
                           {"library_version": new_version, "note": note, "embedder": enc.name, "dim": dim})
        log.info("library %s: wrote version %d (%s; %s: %d skills, %d talents, %d labels)",
                 self.uri, new_version, note, env, len(skills), len(talents), len(labels))
        self._load(row)
        return new_version
