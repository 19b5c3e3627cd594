"""TextWorld generated-games family (DESIGN.md §2): game generation, the cache, the expert-check CLI.

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

    python -m talentrl_core.envs.textworld.games --check --challenge tw-coin_collector \\
        --settings level=5 --seeds 100001 100050 --workers 2
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from ...config import EnvConfig
from ..base import Env, Task
from .settings import CHALLENGES, GameSpec, canonical_settings, challenge_entry, parse_settings, spec_of
from .strategies import REVERSE

__all__ = ["canonical_settings", "parse_settings", "generate_game", "prepare_games", "route_of", "walkthrough_route",
           "ROUTE_SUFFIX", "is_generated", "play_expert", "main"]

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


# --------------------------------------------------------------------------------------------------
# CLI: play the expert on a panel
# --------------------------------------------------------------------------------------------------


def play_expert(env: Env, task: Task, max_steps: int = 100) -> dict[str, Any]:
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
    from ..registry import make_family  # the family module imports this one: reach it through the registry

    family = make_family(cfg, Path(args.cache_dir))
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
    p = argparse.ArgumentParser(prog="python -m talentrl_core.envs.textworld.games", description=__doc__.split("\n")[0])
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
