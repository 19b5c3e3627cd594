"""Who answers the rollout loop's prompts (``rollout.run_episodes``): a ``Policy`` completes a batch of
``PolicyInput`` (a routing or an execution prompt, with the completions it may choose from where the action space is
closed). ``ExpertPolicy`` writes the environment's expert (or one strategy expert) in the completion format (the SFT
labels), ``RandomPolicy`` picks uniformly among the allowed completions, ``LLMPolicy`` asks a generation backend."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Hashable, Optional, Protocol, Sequence

from .envs.base import Env
from .generation import GenRequest, GenResult
from .prompts import CHAT_TEMPLATE_KWARGS, format_action


@dataclass
class PolicyInput:
    kind: str  # "route" | "exec"
    messages: list[dict]
    allowed: Optional[list[str]]
    seed: Optional[int]
    env: Optional[Env] = None
    env_name: str = ""
    cache_key: Optional[Hashable] = None
    "Same key on consecutive turns of one episode: a caching backend re-reads only the changed prompt tail."


class Policy(Protocol):
    name: str

    def complete(self, items: Sequence[PolicyInput]) -> list[GenResult]: ...


class ExpertPolicy:
    """The environment's expert, written in the policy's completion format (SFT labels).

    ``strategy`` names one of the family's strategy experts (``envs.strategies``): the env's
    ``strategy_action(strategy)`` acts instead of its strategy-blind ``expert_action()``, and every
    trajectory records the strategy.
    """

    name = "expert"

    def __init__(self, strategy: Optional[str] = None):
        self.strategy = strategy

    def _act(self, env) -> Optional[str]:
        if env is None:
            return None
        return env.strategy_action(self.strategy) if self.strategy else env.expert_action()

    def complete(self, items):
        out = []
        for it in items:
            act = self._act(it.env)
            text = format_action(it.env_name, act) if act else ""
            out.append(GenResult(text=text, token_ids=[], prompt_tokens=0))
        return out


class RandomPolicy:
    """Uniform over the allowed completions (admissible actions / talent ids)."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def complete(self, items):
        return [GenResult(text=self.rng.choice(it.allowed) if it.allowed else "", token_ids=[], prompt_tokens=0) for it in items]


class LLMPolicy:
    """The language model through a generation backend; constrained decoding where allowed is given."""

    def __init__(self, generator, tokenizer, max_new_tokens: int = 32, temperature: float = 1.0, constrained: bool = True, name: str = "llm"):
        self.gen = generator
        self.tok = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.constrained = constrained
        self.name = name

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        return self.tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True,
                                            **CHAT_TEMPLATE_KWARGS)["input_ids"]

    def complete(self, items):
        if hasattr(self.gen, "generate_chat"):  # OpenAI-compatible endpoint: chat in, text out
            return self.gen.generate_chat([it.messages for it in items], self.max_new_tokens, self.temperature, [it.seed for it in items])
        # Routing is always decoded under the menu constraint, in both decoding modes: the RL trainer scores the menu
        # exactly (``route``), so the evaluated routing policy is the trained one and its log-probs are the behaviour's.
        reqs = [
            GenRequest(self.prompt_ids(it.messages), it.allowed if (self.constrained or it.kind == "route") else None,
                       it.seed, it.cache_key)
            for it in items
        ]
        return self.gen.generate(reqs, self.max_new_tokens, self.temperature)


def action_completions(env_name: str, admissible: Optional[list[str]]) -> Optional[list[str]]:
    """The allowed completions for constrained decoding (None when the action space is open)."""
    if admissible is None:
        return None
    return [format_action(env_name, a) for a in admissible if a not in ("look", "inventory")] or None

