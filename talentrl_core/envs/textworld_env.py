"""TextWorld generated-games family (DESIGN.md §2).

Games come from TextWorld's challenge generators (``tw-coin_collector``, ``tw-treasure_hunter``,
``tw-simple``, ``tw-cooking``), identified by ``(challenge, settings, seed)``. Each game is generated
and compiled once into ``<cache_dir>/textworld/<challenge>/<settings>/<seed>.z8`` (plus the ``.json``
TextWorld needs for state tracking): compiled in a temporary folder beside its destination and moved
into place, so a reader never sees half a game and two processes racing on one game both end fine.
The same seed gives the same game (same first observation, same walkthrough).

Inform7's compiler writes into ``~/Inform``. Every compilation here runs with ``HOME`` pointing at a
scratch folder inside its own temporary folder (nothing is written to the user's home, and parallel
compilations share nothing).

Reward is the normalised score delta: ``(score_t - score_{t-1}) / max_score``, so an episode's rewards
sum to its normalised final score. The expert is TextWorld's ``policy_commands``, recomputed by
TextWorld after every command (the agent's own moves included). Where TextWorld has no policy for a
game (tw-cooking with ``drop``), the expert replays the game's walkthrough while the agent has followed
it, and has no action once the agent has deviated.

Check the expert on a panel::

    python -m talentrl_core.envs.textworld_env --check --challenge tw-coin_collector \\
        --settings level=5 --seeds 100001 100050 --workers 2
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from talentrl_core.config import EnvConfig
from talentrl_core.envs.base import StepResult, Task
from talentrl_core.envs.strategies import EpisodeView, get_strategy
from talentrl_core.envs.textworld_maps import MAPS
from talentrl_core.envs.textworld_strategies import HEADINGS, REVERSE, hide_route, hint_route, quadrant_of

FAMILY = "textworld"
CHALLENGES = ("tw-coin_collector", "tw-treasure_hunter", "tw-simple", "tw-cooking") + tuple(MAPS)
"TextWorld's generated challenges, then the hand-built maps of ``textworld_maps``."
SPLITS = ("train", "eval")
_SAFE = re.compile(r"^[A-Za-z0-9_.=,-]+$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


# --------------------------------------------------------------------------------------------------
# Game identity: challenge, canonical settings, seed
# --------------------------------------------------------------------------------------------------


def canonical_settings(settings: str) -> str:
    """Canonical form of a settings string: keys sorted, ``-`` in keys as ``_``, flags as ``k=1``.

    >>> canonical_settings(" recipe=1, take=1,go=6 ")
    'go=6,recipe=1,take=1'
    >>> canonical_settings("open,cook=true,cut=0,recipe-seed=3")
    'cook=1,open=1,recipe_seed=3'
    >>> canonical_settings("")
    'default'
    """
    pairs: dict[str, str] = {}
    for part in (settings or "").split(","):
        part = part.strip()
        if not part or part == "default":
            continue
        k, sep, v = part.partition("=")
        k = k.strip().replace("-", "_")
        v = v.strip() if sep else "1"
        if v.lower() in _TRUE and not v.isdigit():
            v = "1"
        if v.lower() in _FALSE and not v.isdigit():
            v = "0"
        if not k:
            raise ValueError(f"settings {settings!r}: empty key in {part!r}")
        if k in pairs and pairs[k] != v:
            raise ValueError(f"settings {settings!r}: {k} given twice")
        pairs[k] = v
    # A false flag is the same game as an absent one.
    out = ",".join(f"{k}={v}" for k, v in sorted(pairs.items()) if v != "0" or not _is_flag_name(k))
    if out and not _SAFE.match(out):
        raise ValueError(f"settings {settings!r}: only letters, digits, '_', '.', '-' are allowed in keys and values")
    return out or "default"


ENV_OPTIONS = {"route": ("stated", "hidden", "hint"), "quadrant": ("any",) + tuple(HEADINGS)}
"""Settings the environment applies itself (not TextWorld's generator); the game file is the one without them.

* ``route=hidden`` shows the goal without its directions (``textworld_strategies.hide_route``); ``route=hint``
  replaces them with the set of directions the route uses ("every step of it goes north or east",
  ``hint_route``).
* ``quadrant=ne|sw|nw|se`` keeps only the seeds whose walkthrough moves stay in that quadrant
  (``quadrant_of``): a family where a heading strategy is right at every step."""


def split_settings(settings: str) -> tuple[str, dict[str, str]]:
    """Canonical settings → (the generator's settings, the env options with defaults filled in).

    >>> split_settings("level=5,route=hidden")
    ('level=5', {'route': 'hidden', 'quadrant': 'any'})
    >>> split_settings("level=5")
    ('level=5', {'route': 'stated', 'quadrant': 'any'})
    """
    game, opts = [], {k: v[0] for k, v in ENV_OPTIONS.items()}
    canon = canonical_settings(settings)
    for pair in ([] if canon == "default" else canon.split(",")):
        k, _, v = pair.partition("=")
        if k in ENV_OPTIONS:
            if v not in ENV_OPTIONS[k]:
                raise ValueError(f"settings {settings!r}: {k}={v!r}; choose from {list(ENV_OPTIONS[k])}")
            opts[k] = v
        else:
            game.append(pair)
    return ",".join(game) or "default", opts


def _is_flag_name(key: str) -> bool:
    # Boolean options of the challenges (tw-cooking: open/cook/cut/drop, tw-simple: test).
    return key in {"open", "cook", "cut", "drop", "test"}


def challenge_entry(challenge: str) -> tuple[str, Callable, Callable]:
    """(description, make, add_arguments) of a challenge: one of ``textworld_maps.MAPS`` or TextWorld's own."""
    import textworld.challenges

    if challenge in MAPS:
        return MAPS[challenge]
    if challenge not in textworld.challenges.CHALLENGES:
        raise ValueError(f"unknown TextWorld challenge {challenge!r}; choose from {sorted(set(textworld.challenges.CHALLENGES) | set(MAPS))}")
    return textworld.challenges.CHALLENGES[challenge]


def parse_settings(challenge: str, settings: str) -> dict[str, Any]:
    """Turn ``"level=5"`` into the settings mapping the challenge's ``make`` expects.

    Parsed with the challenge's own argument parser, so types, choices and defaults are TextWorld's.
    Raises ValueError naming the challenge and what is wrong.
    """
    _, _, add_arguments = challenge_entry(challenge)
    settings, _ = split_settings(settings)

    class _Parser(argparse.ArgumentParser):
        def error(self, message):  # never sys.exit from library code
            raise ValueError(f"{challenge} settings {settings!r}: {message}")

    parser = _Parser(prog=challenge, add_help=False)
    add_arguments(parser)
    flags = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    argv: list[str] = []
    canon = canonical_settings(settings)
    if canon != "default":
        for pair in canon.split(","):
            k, _, v = pair.partition("=")
            opt = "--" + k.replace("_", "-")
            if k in flags:
                if v != "0":
                    argv.append(opt)
            else:
                argv += [opt, v]
    return vars(parser.parse_args(argv))


@dataclass(frozen=True)
class GameSpec:
    challenge: str
    settings: str
    "Canonical settings string (``canonical_settings``)."
    seed: int

    @property
    def key(self) -> str:
        return f"{self.challenge}/{self.settings}/{self.seed}"

    @staticmethod
    def from_key(key: str) -> "GameSpec":
        parts = key.split("/")
        if len(parts) != 3:
            raise ValueError(f"TextWorld task key {key!r}: expected '<challenge>/<settings>/<seed>'")
        challenge, settings, seed = parts
        return GameSpec(challenge, canonical_settings(settings), int(seed))

    @property
    def game_settings(self) -> str:
        "The generator's settings (env options such as ``route`` removed): what the game file depends on."
        return split_settings(self.settings)[0]

    @property
    def options(self) -> dict[str, str]:
        return split_settings(self.settings)[1]

    def game_file(self, cache_dir: str | os.PathLike) -> Path:
        return Path(cache_dir) / FAMILY / self.challenge / self.game_settings / f"{self.seed}.z8"


def spec_of(task: Task) -> GameSpec:
    return GameSpec.from_key(task.key)


# --------------------------------------------------------------------------------------------------
# Generation (cached, atomic, reproducible)
# --------------------------------------------------------------------------------------------------


@contextmanager
def _quiet_jericho() -> Iterator[None]:
    """Jericho warns "not fully supported ... score detection disabled" for every TextWorld game; TextWorld
    reads the score itself (tw-extra-infos), so the warning is noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is not fully supported.*")
        yield


_HOME_LOCK = threading.Lock()


@contextmanager
def _home(path: Path) -> Iterator[None]:
    """Point HOME at ``path`` while Inform7 runs (it writes ~/Inform); restore it afterwards.

    HOME is process-wide, so generations inside one process are serialised (two threads resetting envs
    on missing games must not restore each other's HOME); processes run in parallel.
    """
    path.mkdir(parents=True, exist_ok=True)
    with _HOME_LOCK:
        old = os.environ.get("HOME")
        os.environ["HOME"] = str(path)
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = old


_SCRATCH_HOME: Optional[Path] = None


def _scratch_home() -> Path:
    """This process's scratch HOME for Inform7, created once and removed at exit.

    Inform7 sets up ``~/Inform`` on its first run in a HOME; a fresh HOME per game cost ~0.8 s of a ~1.5 s
    game on this machine (measured: 1.46 vs 0.61 s per treasure-hunter game), so games share one per process.
    """
    global _SCRATCH_HOME
    if _SCRATCH_HOME is None or not _SCRATCH_HOME.is_dir():
        _SCRATCH_HOME = Path(tempfile.mkdtemp(prefix="talentrl-inform7-home-"))
        atexit.register(shutil.rmtree, _SCRATCH_HOME, True)
    return _SCRATCH_HOME


_KB_CACHE: dict[tuple, Any] = {}


@contextmanager
def _memoised_knowledge_base() -> Iterator[None]:
    """Parse each TextWorld knowledge base once per process instead of once per game.

    Every challenge's ``make`` calls ``KnowledgeBase.load(KB_PATH)``, which re-parses the logic and grammar
    files with tatsu: ~0.2-0.4 s of a ~0.8 s treasure-hunter game on this machine. The knowledge base is
    read-only during generation, so the games are byte-identical (tests/test_env_textworld.py checks it).
    """
    from textworld.generator.data import KnowledgeBase

    original = KnowledgeBase.__dict__["load"]

    def load(cls, target_dir=None, logic_path=None, grammar_path=None):
        key = (target_dir, logic_path, grammar_path)
        if key not in _KB_CACHE:
            _KB_CACHE[key] = original.__func__(cls, target_dir, logic_path, grammar_path)
        return _KB_CACHE[key]

    KnowledgeBase.load = classmethod(load)
    try:
        yield
    finally:
        KnowledgeBase.load = original


def _set_walkthrough_in_python(maker, commands: Sequence[str]) -> bool:
    """``GameMaker.set_walkthrough`` without its throw-away compile; False when it cannot be done exactly.

    TextWorld's version compiles the game (Inform7 + Inform6, ~0.4 s) only to play ``commands`` and record which
    logic actions trigger each win event; the game is then built and compiled again. The actions come from
    TextWorld's own state tracker (``textworld.envs.tw.TextWorldEnv``, which the compiled game runs beside the
    Z-machine), so the same tracker is driven directly here. The build and the Inform7 source are generated as the
    original does (the source sets the objective the final build keeps); a command the tracker does not list
    verbatim returns False and the caller falls back to the original.
    """
    from textworld.core import EnvInfos
    from textworld.envs.tw import TextWorldEnv
    from textworld.generator.game import Game
    from textworld.generator.inform7 import Inform7Game

    game = maker.build()
    maker._working_game = game
    Inform7Game(game).gen_source(seed=1234)  # what the compile does to the game object (it fills the objective)
    env = TextWorldEnv(EnvInfos(last_action=True, intermediate_reward=True))
    env._game = Game.deserialize(game.serialize())  # the compiled game's tracker reads the game back from its .json
    env._inform7 = Inform7Game(env._game)
    state = env.reset()
    events = {event: event.copy() for quest in maker.quests for event in quest.win_events}
    progressions = [ep for qp in state["_game_progression"].quest_progressions for ep in qp.win_events]
    actions: list = []
    for i, cmd in enumerate(commands):
        if state.get("done"):
            raise ValueError("Game has ended before finishing playing all commands.")
        valid = state["_valid_commands"]
        if valid.count(cmd.strip()) != 1:  # not listed, or ambiguous: only the Z-machine can tell
            return False
        before = [ep.triggered for ep in progressions]
        state, _, _ = env.step(cmd)
        actions.append(state["_last_action"])
        for was, ep in zip(before, progressions):
            if not was and ep.triggered:
                events[ep.event].actions = list(actions)
                events[ep.event].commands = list(commands[: i + 1])
    for k, v in events.items():
        k.actions, k.commands = v.actions, v.commands
    return True


@contextmanager
def _walkthrough_without_compile() -> Iterator[None]:
    """Challenges that call ``GameMaker.set_walkthrough`` (coin collector, simple, cooking) compile every game
    twice; this drops the first compile (``_set_walkthrough_in_python``). Games stay byte-identical
    (tests/test_env_textworld.py)."""
    from textworld.generator.maker import GameMaker

    original = GameMaker.set_walkthrough

    def set_walkthrough(self, commands):
        if not _set_walkthrough_in_python(self, commands):
            original(self, commands)

    GameMaker.set_walkthrough = set_walkthrough
    try:
        yield
    finally:
        GameMaker.set_walkthrough = original


def is_generated(game_file: Path) -> bool:
    return game_file.is_file() and game_file.with_suffix(".json").is_file()


def generate_game(cache_dir: str | os.PathLike, spec: GameSpec) -> Path:
    """Return the compiled game for ``spec``, generating it first when it is not in the cache."""
    dest = spec.game_file(cache_dir)
    if is_generated(dest):
        return dest
    import textworld
    from textworld.generator import compile_game

    settings = parse_settings(spec.challenge, spec.settings)
    _, make, _ = challenge_entry(spec.challenge)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.seed}.", suffix=".tmp", dir=dest.parent))
    try:
        options = textworld.GameOptions()
        options.seeds = int(spec.seed)
        options.path = str(tmp / dest.name)
        options.file_ext = ".z8"
        options.force_recompile = True
        with _home(_scratch_home()), _quiet_jericho(), _memoised_knowledge_base(), _walkthrough_without_compile():
            game = make(settings, options)
            compiled = Path(compile_game(game, options))
        json_file = compiled.with_suffix(".json")
        if not (compiled.is_file() and json_file.is_file()):
            raise RuntimeError(f"TextWorld did not produce {compiled} and its .json for {spec.key}")
        # json first: a reader treats the .z8 as the "ready" mark and then finds its .json beside it.
        os.replace(json_file, dest.with_suffix(".json"))
        os.replace(compiled, dest)
    except Exception as e:
        raise RuntimeError(f"generating TextWorld game {spec.key} failed: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


ROUTE_SUFFIX = ".route.json"
"Beside ``<seed>.z8``: ``<seed>.route.json`` holds the walkthrough route of a seed built but never compiled."


def _moves(walk: Sequence[str]) -> list[str]:
    return [c[3:] for c in walk if c.startswith("go ") and c[3:] in REVERSE]


def route_of(cache_dir: str | os.PathLike, spec: GameSpec) -> list[str]:
    """The directions of ``spec``'s walkthrough. From the compiled game's .json when there is one; else the game is
    built in memory (a third of the cost of compiling it) and its route kept in ``<seed>.route.json``, so a seed that
    a ``quadrant=`` family drops is never compiled."""
    game = spec.game_file(cache_dir)
    if is_generated(game):
        return walkthrough_route(game)
    marker = game.with_suffix(ROUTE_SUFFIX)
    if marker.is_file():
        try:
            return list(json.loads(marker.read_text())["route"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RuntimeError(f"TextWorld route file {marker} is unreadable ({e}); delete it to rebuild") from e
    import textworld

    _, make, _ = challenge_entry(spec.challenge)
    options = textworld.GameOptions()
    options.seeds = int(spec.seed)
    with _home(_scratch_home()), _quiet_jericho(), _memoised_knowledge_base(), _walkthrough_without_compile():
        route = _moves(make(parse_settings(spec.challenge, spec.settings), options).metadata["walkthrough"])
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": spec.key, "route": route}))
    os.replace(tmp, marker)
    return route


def _route_worker(args: tuple[str, str, str, int]) -> tuple[Path, list[str]]:
    cache_dir, challenge, settings, seed = args
    spec = GameSpec(challenge, settings, seed)
    return spec.game_file(cache_dir), route_of(cache_dir, spec)


def walkthrough_route(game_file: Path) -> list[str]:
    """The directions of a generated game's walkthrough, in order (read from its .json, no game started)."""
    path = Path(game_file).with_suffix(".json")
    try:
        walk = json.loads(path.read_text())["metadata"]["walkthrough"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RuntimeError(f"TextWorld game metadata {path} is unreadable or has no walkthrough ({e}); delete it to regenerate") from e
    return _moves(walk)


def _generate_worker(args: tuple[str, str, str, int]) -> tuple[str, float]:
    cache_dir, challenge, settings, seed = args
    t0 = time.perf_counter()
    generate_game(cache_dir, GameSpec(challenge, settings, seed))
    return f"{challenge}/{settings}/{seed}", time.perf_counter() - t0


def prepare_games(
    cache_dir: str | os.PathLike, tasks: Sequence[Task], workers: int = 2, progress: bool = True
) -> dict[str, float]:
    """Generate the games of ``tasks`` missing from the cache, ``workers`` processes in parallel.

    Returns ``{task key: generation seconds}`` for the games generated now (cached ones are skipped).
    Workers are spawned (not forked) so a parent holding torch threads cannot deadlock them; like any
    spawn pool, a plain script that calls this must guard its entry point with
    ``if __name__ == "__main__":``.
    """
    by_file = {s.game_file(cache_dir): s for s in map(spec_of, tasks)}  # route=hidden shares its game
    specs = sorted(by_file.values(), key=lambda s: (s.challenge, s.settings, s.seed))
    missing = [s for s in specs if not is_generated(s.game_file(cache_dir))]
    if not missing:
        return {}
    jobs = [(str(cache_dir), s.challenge, s.settings, s.seed) for s in missing]
    return dict(_run_jobs(_generate_worker, jobs, workers, "textworld games", progress))


def _run_jobs(worker: Callable, jobs: list, workers: int, desc: str, progress: bool) -> list:
    """``worker`` over ``jobs`` in ``workers`` spawned processes (in this one when ``workers <= 1``), with a bar."""
    from tqdm.auto import tqdm

    out = []
    bar = tqdm(total=len(jobs), desc=desc, unit="game", disable=not progress)
    try:
        if workers <= 1 or len(jobs) <= 1:
            for job in jobs:
                out.append(worker(job))
                bar.update(1)
        else:
            import multiprocessing as mp

            with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as pool:
                for fut in as_completed([pool.submit(worker, job) for job in jobs]):
                    out.append(fut.result())
                    bar.update(1)
    finally:
        bar.close()
    return out


# --------------------------------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------------------------------

_BANNER_LINE = re.compile(r"^[\s_$|\\/<>]+$")


def clean_text(text: str) -> str:
    """Drop TextWorld's ASCII-art banner, the ``>`` prompt line (with its status bar) and blank runs."""
    lines = []
    for line in (text or "").splitlines():
        if line.strip() and _BANNER_LINE.match(line):
            continue
        if line.lstrip().startswith(">"):
            continue
        lines.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _normalise_command(action: str) -> str:
    # One line, single spaces, lower case: TextWorld's admissible commands are written that way, and a
    # newline inside an action must not reach the interpreter as a second command.
    return " ".join(str(action).split()).lower()


class TextWorldEnv:
    """One live TextWorld game. ``reset`` generates the game if the cache lacks it."""

    name = FAMILY

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        self.cache_dir = Path(cache_dir)
        self._env = None
        self._game_file: Optional[Path] = None
        self._state = None
        self._task: Optional[Task] = None
        self._score = 0
        self._max_score = 0
        self._done = False
        self._won = False
        self._history: list[str] = []
        self._hide_route = False
        self._objective = ""
        self._first_obs = ""
        self._obs = ""
        self._transcript: list[tuple[str, str]] = []

    @property
    def task_type(self) -> Optional[str]:
        return self._task.task_type if self._task else None

    @property
    def task_id(self) -> Optional[str]:
        return self._task.task_id if self._task else None

    def reset(self, task: Task) -> str:
        import textworld

        game_file = generate_game(self.cache_dir, spec_of(task))
        if self._env is None or self._game_file != game_file:
            self.close()
            infos = textworld.EnvInfos(
                admissible_commands=True,
                policy_commands=True,
                won=True,
                lost=True,
                score=True,
                max_score=True,
                objective=True,
                moves=True,
            )
            with _quiet_jericho():
                self._env = textworld.start(str(game_file), request_infos=infos)
            self._game_file = game_file
        self._task = task
        self._state = self._env.reset()
        self._score = int(self._state.get("score") or 0)
        self._max_score = int(self._state.get("max_score") or 0)
        self._done = bool(self._state.get("won") or self._state.get("lost"))
        self._won = bool(self._state.get("won"))
        self._history = []
        self._transcript = []
        objective = " ".join(str(self._state.get("objective") or "").split())
        route = spec_of(task).options["route"]
        self._hide_route = route != "stated"
        self._objective = {"hidden": hide_route, "hint": hint_route}.get(route, str)(objective)
        obs = clean_text(self._state.feedback)
        if self._hide_route:  # the intro observation repeats the objective: show the hidden text there too
            paras = obs.split("\n\n")
            obs = "\n\n".join(self._objective if " ".join(p.split()) == objective else p for p in paras)
        self._first_obs = self._obs = obs
        return obs

    def _require(self) -> None:
        if self._state is None:
            raise RuntimeError("TextWorldEnv: call reset(task) first")

    def goal(self) -> str:
        self._require()
        return self._objective

    def _progress(self, score: int) -> float:
        if self._max_score > 0:
            return score / self._max_score
        return 1.0 if self._won else 0.0

    def step(self, action: str) -> StepResult:
        self._require()
        command = _normalise_command(action)
        valid = command in set(self._state.get("admissible_commands") or [])
        if self._done:
            return StepResult(
                "The game is over.", 0.0, True, self._won,
                {"valid": valid, "score": self._score, "max_score": self._max_score, "lost": not self._won},
            )
        before = self._progress(self._score)
        self._state, _, _ = self._env.step(command)
        self._history.append(command)
        won = bool(self._state.get("won"))
        lost = bool(self._state.get("lost"))
        score = self._state.get("score")
        self._score = int(score) if score is not None else self._score
        self._won = won
        self._done = won or lost
        reward = self._progress(self._score) - before
        info = {
            "valid": valid,
            "score": self._score,
            "max_score": self._max_score,
            "lost": lost,
            "moves": self._state.get("moves"),
        }
        obs = clean_text(self._state.feedback)
        self._obs = obs
        self._transcript.append((command, obs))
        return StepResult(obs, float(reward), self._done, won, info)

    def strategy_action(self, name: str) -> Optional[str]:
        """The next command of the registered strategy expert ``name`` (``textworld_strategies``)."""
        self._require()
        if self._done:
            return None
        view = EpisodeView(self._objective, self._first_obs, self._obs, tuple(self.admissible_actions()), tuple(self._transcript))
        return get_strategy(FAMILY, name).act(view)

    def admissible_actions(self) -> list[str]:
        self._require()
        return sorted(set(self._state.get("admissible_commands") or []))

    def expert_action(self) -> Optional[str]:
        self._require()
        if self._done:
            return None
        policy = self._state.get("policy_commands") or []
        if policy:
            return policy[0]
        # TextWorld gives no policy for some games (tw-cooking with `drop`): replay the walkthrough as
        # long as the agent has followed it exactly.
        walk = self.walkthrough()
        n = len(self._history)
        if n < len(walk) and self._history == walk[:n]:
            return walk[n]
        return None

    def walkthrough(self) -> list[str]:
        """The game's recorded walkthrough (from its .json; the same for every episode of the game)."""
        self._require()
        return list(self._state.get("extra.walkthrough") or [])

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            finally:
                self._env = None
                self._game_file = None


# --------------------------------------------------------------------------------------------------
# The family
# --------------------------------------------------------------------------------------------------


class TextWorldFamily:
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


# --------------------------------------------------------------------------------------------------
# CLI: play the expert on a panel
# --------------------------------------------------------------------------------------------------


def play_expert(env: TextWorldEnv, task: Task, max_steps: int = 100) -> dict[str, Any]:
    t0 = time.perf_counter()
    env.reset(task)
    reset_s = time.perf_counter() - t0
    total, steps, step_s, won = 0.0, 0, 0.0, False
    for _ in range(max_steps):
        action = env.expert_action()
        if action is None:
            break
        t1 = time.perf_counter()
        r = env.step(action)
        step_s += time.perf_counter() - t1
        steps += 1
        total += r.reward
        if r.done:
            won = r.won
            break
    return {"key": task.key, "won": won, "return": total, "steps": steps, "reset_s": reset_s, "step_s": step_s}


def _check(args: argparse.Namespace) -> int:
    cfg = EnvConfig(
        challenges=[args.challenge],
        challenge_settings=args.settings,
        eval_seeds=[args.seeds[0], args.seeds[1]],
    )
    family = TextWorldFamily(cfg, Path(args.cache_dir))
    tasks = family.tasks("eval")
    t0 = time.perf_counter()
    gen = family.prepare(tasks, workers=args.workers)
    gen_wall = time.perf_counter() - t0
    env = family.make()
    results = [play_expert(env, t, args.max_steps) for t in tasks]
    env.close()
    wins = sum(r["won"] for r in results)
    n = len(results)
    steps = sum(r["steps"] for r in results)
    print(f"challenge {args.challenge}  settings {family.settings}  seeds {args.seeds[0]}-{args.seeds[1]}")
    if gen:
        per = sum(gen.values()) / len(gen)
        print(f"generated {len(gen)} games in {gen_wall:.1f} s wall ({args.workers} workers; {per:.2f} s per game in a worker)")
    else:
        print("all games were cached")
    print(f"expert wins {wins}/{n} ({100.0 * wins / max(n, 1):.1f}%)  mean return {sum(r['return'] for r in results) / max(n, 1):.3f}")
    print(
        f"expert steps {steps / max(n, 1):.1f}/game (min {min(r['steps'] for r in results)}, max {max(r['steps'] for r in results)})"
        f"  reset {1000 * sum(r['reset_s'] for r in results) / max(n, 1):.1f} ms"
        f"  step {1000 * sum(r['step_s'] for r in results) / max(steps, 1):.2f} ms"
    )
    for r in results:
        if not r["won"]:
            print(f"  lost: {r['key']} after {r['steps']} steps")
    return 0 if wins == n else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m talentrl_core.envs.textworld_env", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="generate the games and play the expert on each")
    p.add_argument("--challenge", default="tw-coin_collector", choices=list(CHALLENGES))
    p.add_argument("--settings", default="level=5", help="k=v pairs separated by commas")
    p.add_argument("--seeds", type=int, nargs=2, default=[100001, 100050], metavar=("FIRST", "LAST"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--cache-dir", default="artifacts/cache")
    args = p.parse_args(argv)
    if not args.check:
        p.print_help()
        return 2
    return _check(args)


if __name__ == "__main__":
    sys.exit(main())
