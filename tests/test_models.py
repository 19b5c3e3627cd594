"""Tiny model factory: offline tokenizer round trip, seeded builds, generation (free and constrained)."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from talentrl_core.config import ModelConfig
from talentrl_core.generation import GenRequest, TransformersGenerator
import dataclasses
import json

from talentrl_core.models import build_tiny, ensure_base_model, load_model

SMALL = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                    intermediate_size=64, vocab_size=600, max_position_embeddings=512, device="cpu")

TEXTS = [
    "Your task is to: put a clean apple in fridge.",
    "<think>find it</think><action>go to countertop 1</action>",
    "Who wrote Hamlet? <search>Hamlet author</search> <answer>William Shakespeare</answer>",
    "naïve café — ünïcödé",
]


def test_tokenizer_save_reload_identical_ids(tmp_path, shared_data):
    path = build_tiny(SMALL, tmp_path / "m", shared_data)
    mine = load_model(path)[1]
    auto = AutoTokenizer.from_pretrained(str(path))
    for t in TEXTS:
        ids = mine(t)["input_ids"]
        assert ids == auto(t)["input_ids"]
        assert auto.decode(ids) == t
    assert len(auto("<action>")["input_ids"]) == 1  # protocol tags are single tokens


def test_chat_template_marks_assistant_tokens(tmp_path, shared_data):
    _, tok = load_model(build_tiny(SMALL, tmp_path / "m", shared_data))
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "<action>go east</action>"}]
    out = tok.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    mask = out["assistant_masks"]
    marked = [i for i, m in zip(out["input_ids"], mask) if m]
    assert tok.decode(marked) == "<action>go east</action><|im_end|>"


def test_base_model_rebuilt_when_its_architecture_changes(tmp_path, shared_data):
    base = tmp_path / "base"
    ensure_base_model(SMALL, base, shared_data)
    first = (base / "model.safetensors").stat().st_mtime_ns
    ensure_base_model(SMALL, base, shared_data)  # same spec: kept as it is
    assert (base / "model.safetensors").stat().st_mtime_ns == first
    wider = dataclasses.replace(SMALL, hidden_size=48)
    ensure_base_model(wider, base, shared_data)  # another architecture: never a stale model
    assert json.loads((base / "config.json").read_text())["hidden_size"] == 48
    assert json.loads((base / "talentrl_model.json").read_text())["hidden_size"] == 48


def test_seeded_builds_identical(tmp_path, shared_data):
    a = AutoModelForCausalLM.from_pretrained(str(build_tiny(SMALL, tmp_path / "a", shared_data)))
    b = AutoModelForCausalLM.from_pretrained(str(build_tiny(SMALL, tmp_path / "b", shared_data)))
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()


def test_generation_free_and_constrained(tmp_path, shared_data):
    model, tok = load_model(build_tiny(SMALL, tmp_path / "m", shared_data))
    gen = TransformersGenerator(model, tok)
    prompt = tok.apply_chat_template([{"role": "user", "content": "go"}], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    allowed = ["<action>go east</action>", "<action>take coin</action>", "<action>go west</action>"]
    reqs = [GenRequest(prompt), GenRequest(prompt, allowed, seed=1), GenRequest(prompt[:5], allowed, seed=2)]
    outs = gen.generate(reqs, max_new_tokens=12, temperature=1.0)
    assert len(outs[0].token_ids) >= 1
    for o in outs[1:]:  # a random model still produces exactly an admissible completion under the mask
        assert o.text in allowed and o.token_ids[-1] == tok.eos_token_id
        assert all(lp <= 0 for lp in o.logprobs)
    # per-row seeds: the same seed gives the same sample whatever the batch
    again = gen.generate([GenRequest(prompt, allowed, seed=1)], 12, 1.0)
    assert again[0].text == outs[1].text


def _turn_prompts(tok, n_turns: int) -> list[list[list[int]]]:
    """Per episode, one prompt per turn that extends a fixed head with a growing tail (like the rollout's)."""
    eps = []
    for e, goal in enumerate(["collect the coin", "find the key then open the chest", "go east twice"]):
        turns, acts = [], []
        for k in range(n_turns):
            acts.append(["go east", "go west", "take coin"][(e + k) % 3])
            msg = f"Task: {goal}\nSkills: go, then take\nActions so far: {'; '.join(acts)}\nObs: room {k}"
            turns.append(tok.apply_chat_template([{"role": "user", "content": msg}], add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)["input_ids"])
        eps.append(turns)
    return eps


def test_kv_reuse_and_forced_tokens_match_plain_decoding(tmp_path, shared_data):
    """Cached prompt heads and trie-forced tokens change the cost, never the policy (float32: exact tokens)."""
    model, tok = load_model(build_tiny(SMALL, tmp_path / "m", shared_data))
    allowed = ["<action>go east</action>", "<action>take coin</action>", "<action>go west</action>"]
    cached = TransformersGenerator(model, tok)
    plain = TransformersGenerator(model, tok, reuse_kv=False)
    eps = _turn_prompts(tok, 4)
    for k in range(4):
        live = list(range(3)) if k < 2 else [0, 2]  # episode 1 ends after two turns: its cache is dropped
        reqs = [GenRequest(eps[e][k], allowed, seed=10 * e + k, cache_key=("run", e)) for e in live]
        a = cached.generate(reqs, 12, 1.0)
        b = [plain.generate([GenRequest(eps[e][k], allowed, seed=10 * e + k)], 12, 1.0)[0] for e in live]
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids and x.text == y.text and x.prompt_tokens == y.prompt_tokens
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
        assert set(cached._kv) == {("run", e) for e in live}
    st = cached.stats
    assert st["prefilled_tokens"] < 0.7 * st["prompt_tokens"]  # later turns re-read only the changed tail
    # forced tokens cost no forward: '<action>' starts every completion and '</action>' + eos end it
    assert all(lp == 0.0 for lp in (a[0].logprobs[0], a[0].logprobs[-1], a[0].logprobs[-2]))
    # greedy, against the old decoder (whole prompt, one forward per token): the same tokens and log-probs
    old = TransformersGenerator(model, tok, reuse_kv=False, skip_forced=False)
    reqs = [GenRequest(eps[e][0], allowed, cache_key=("greedy", e)) for e in range(3)]
    for x, y in zip(TransformersGenerator(model, tok).generate(reqs, 12, 0.0), old.generate(reqs, 12, 0.0)):
        assert x.token_ids == y.token_ids
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    assert old.stats["forwards"] > 1  # the old path reads every token, forced or not


def test_vllm_constraint_is_a_structured_choice_or_a_named_error():
    from talentrl_core.generation_vllm import VLLMGenerator

    assert VLLMGenerator.sampling_kwargs(None) == {}
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="model.decoding=free"):
            VLLMGenerator.sampling_kwargs(["<talent>T1</talent>"])
    else:  # pragma: no cover - GPU environments
        kw = VLLMGenerator.sampling_kwargs(["<talent>T1</talent>", "<talent>T2</talent>"])
        assert kw["structured_outputs"].choice == ["<talent>T1</talent>", "<talent>T2</talent>"]
