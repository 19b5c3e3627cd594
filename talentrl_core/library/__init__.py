"""Skill and talent library on LanceDB (DESIGN.md §3).

    from talentrl_core.library import Library, distill_library

    meta = distill_library(trajectories, cfg.library, env="alfworld")     # writes a new version
    lib = Library.open(cfg.library.uri, version=meta["version"], cfg=cfg.library)
    res = lib.retrieve("put a hot apple in the fridge", talent_id=lib.talents("alfworld")[0].talent_id,
                       env="alfworld")
    res.ids, res.scores                                                    # for logging

Modules: ``store`` (versioned tables), ``embed`` (cached sentence embeddings), ``retrieval`` (the scoring
rule), ``templates`` + ``distill_offline`` + ``cluster`` (deterministic miner), ``teacher_client`` +
``distill_teacher`` (LLM teacher), ``evolution`` (RL-time promotion), ``bank_io`` (JSON banks),
``examples`` (hand-made trajectories for tests and smoke runs). The rollout loop's adapter is
``talentrl_core.knowledge.LibraryKnowledge``.
"""

from .bank_io import export_bank, import_bank, read_bank
from .common import SplitLeakError
from .distill import distill_library
from .embed import Embedder
from .evolution import Candidate, promote, propose_candidates
from .retrieval import RetrievalResult, RetrievedSkill
from .schema import KINDS, LabelRecord, SkillRecord, TalentRecord
from .integrity import LibraryDamagedError, LibraryLockedError, LibraryReadError
from .store import Library, LibraryVersionError

__all__ = [
    "Candidate",
    "Embedder",
    "KINDS",
    "LabelRecord",
    "Library",
    "LibraryDamagedError",
    "LibraryLockedError",
    "LibraryReadError",
    "LibraryVersionError",
    "RetrievalResult",
    "RetrievedSkill",
    "SkillRecord",
    "SplitLeakError",
    "TalentRecord",
    "distill_library",
    "export_bank",
    "import_bank",
    "promote",
    "propose_candidates",
    "read_bank",
]
