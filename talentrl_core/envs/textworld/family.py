"""The TextWorld family: tasks of generated games for ``env.challenges`` (a ``quadrant=`` family keeps only the
seeds whose route stays in the quadrant), games prepared in parallel up front."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Sequence

from ...config import EnvConfig
from ..base import EnvFamily, Task
from .env import TextWorldEnv
from .games import ROUTE_SUFFIX, _route_worker, _run_jobs, is_generated, prepare_games, route_of
from .settings import CHALLENGES, ENV_OPTIONS, FAMILY, SPLITS, GameSpec, canonical_settings, spec_of, split_settings
from .strategies import quadrant_of

class TextWorldFamily(EnvFamily):
    """Tasks of generated TextWorld games for ``cfg.challenges`` under ``cfg.challenge_settings``."""

    name = FAMILY

    def __init__(self, cfg: EnvConfig, cache_dir: str | os.PathLike | None = None) -> None:
        if cache_dir is None:
            if "${" in str(cfg.cache_dir):
                raise ValueError("TextWorldFamily needs a resolved cache_dir (cfg.cache_dir still holds an interpolation)")
            cache_dir = cfg.cache_dir
        self.cfg = cfg
        self.cache_dir = Path(cache_dir)
        if not cfg.challenges:
            raise ValueError("env.challenges is empty: name at least one TextWorld challenge")
        # an entry may carry its own settings: "tw-treasure_hunter:level=15" (else env.challenge_settings)
        self.challenges: list[tuple[str, str]] = []
        for entry in cfg.challenges:
            name, _, own = entry.partition(":")
            if name not in CHALLENGES:
                raise ValueError(f"env.challenges has unknown {name!r}; choose from {list(CHALLENGES)}")
            self.challenges.append((name, canonical_settings(own or cfg.challenge_settings)))
        self.settings = canonical_settings(cfg.challenge_settings)
        for name, rng in (("train_seeds", cfg.train_seeds), ("eval_seeds", cfg.eval_seeds)):
            if len(rng) != 2 or int(rng[0]) > int(rng[1]):
                raise ValueError(f"env.{name}={list(rng)}: give an inclusive [first, last] range with first <= last")

    @staticmethod
    def task_type(challenge: str, settings: str) -> str:
        """The challenge name, plus ``-<value>`` for each env option away from its default, in ``ENV_OPTIONS`` order
        (``tw-coin_collector-hidden``, ``tw-coin_collector-hint-ne``)."""
        opts = split_settings(settings)[1]
        return challenge + "".join(f"-{opts[k]}" for k, vals in ENV_OPTIONS.items() if opts[k] != vals[0])

    def task_types(self) -> list[str]:
        return list(dict.fromkeys(self.task_type(c, s) for c, s in self.challenges))

    def _seeds(self, split: str) -> range:
        if split == "train":
            first, last = self.cfg.train_seeds
        elif split == "eval":
            first, last = self.cfg.eval_seeds
        else:
            raise ValueError(f"TextWorld split {split!r}: choose from {list(SPLITS)}")
        return range(int(first), int(last) + 1)

    def tasks(self, split: str, n: int = 0, seed: int = 0) -> list[Task]:
        """Every (challenge, seed) of the split, challenge-major; ``n > 0`` keeps a seeded subset in that order."""
        out = []
        for challenge, settings in self.challenges:
            for s in self._seeds(split):
                spec = GameSpec(challenge, settings, s)
                out.append(
                    Task(
                        FAMILY, split, self.task_type(challenge, settings), spec.key,
                        {"challenge": challenge, "settings": settings, "seed": s},
                    )
                )
        if any(split_settings(settings)[1]["quadrant"] != "any" for _, settings in self.challenges):
            return self._in_quadrant(out, n, seed)
        if 0 < n < len(out):
            keep = sorted(random.Random(seed).sample(range(len(out)), n))
            out = [out[i] for i in keep]
        return out

    def _in_quadrant(self, tasks: list[Task], n: int, seed: int) -> list[Task]:
        """``tasks`` without those of a ``quadrant=`` challenge whose route leaves the quadrant (``routes``: a
        dropped seed is never compiled). With ``n > 0``, the first n kept along a seeded permutation (a uniform subset
        of the kept tasks), reading routes a chunk at a time, so a small sample does not build the whole range."""
        specs = [spec_of(t) for t in tasks]
        order = list(range(len(tasks)))
        if n > 0:
            random.Random(seed).shuffle(order)
        keep: list[int] = []
        chunk = max(4 * n, 16) if n > 0 else len(order)
        for start in range(0, len(order), chunk):
            idx = order[start:start + chunk]
            routes = self.routes([specs[i] for i in idx if specs[i].options["quadrant"] != "any"])
            keep += [i for i in idx if specs[i].options["quadrant"] == "any"
                     or quadrant_of(routes[specs[i].game_file(self.cache_dir)]) == specs[i].options["quadrant"]]
            if 0 < n <= len(keep):
                break
        return [tasks[i] for i in sorted(keep[:n] if n > 0 else keep)]

    def routes(self, specs: Sequence[GameSpec]) -> dict[Path, list[str]]:
        """The walkthrough route of each spec's game file (``route_of``), the ones not yet known built in parallel."""
        todo = {s.game_file(self.cache_dir): s for s in specs}  # options (route, quadrant) share one game
        known = {f: s for f, s in todo.items() if is_generated(f) or f.with_suffix(ROUTE_SUFFIX).is_file()}
        jobs = [(str(self.cache_dir), s.challenge, s.settings, s.seed) for f, s in todo.items() if f not in known]
        built = dict(_run_jobs(_route_worker, jobs, min(4, os.cpu_count() or 1), "textworld routes", False))
        return {**built, **{f: route_of(self.cache_dir, s) for f, s in known.items()}}

    def make(self) -> TextWorldEnv:
        return TextWorldEnv(self.cache_dir)

    def game_file(self, task: Task) -> Path:
        return spec_of(task).game_file(self.cache_dir)

    def prepare(self, tasks: Sequence[Task], workers: int = 2, progress: bool = True) -> dict[str, float]:
        """Generate the missing games of ``tasks`` in parallel (see ``prepare_games``)."""
        return prepare_games(self.cache_dir, tasks, workers=workers, progress=progress)
