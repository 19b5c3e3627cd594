"""SFT and RL under the official chat templates of real backbones (issue 15): Qwen2.5, Qwen3, Llama-3.1.

The templates are the originals TRL ships for identity comparison (``trl/chat_templates/*.jinja``, Apache-2.0,
copied by TRL from the models' Hub repositories): read from the installed TRL, never downloaded. None has
``{% generation %}`` markers, so the mask comes from rendering each assistant turn with and without it.
The tokenizer is a small BPE trained here, with the backbones' special tokens and end-of-turn token; the model
a random-initialised 2-layer Qwen2 that carries it. Checked per template: the SFT loss mask is exactly the reply,
the RL trainer scores exactly those tokens, a few SFT steps lower the loss, and the rollout's behaviour log-probs
(routing and actions, constrained and free decoding) are what the trainer recomputes.
"""

from pathlib import Path

import pytest
import torch
import trl
from transformers import Qwen2Config, Qwen2ForCausalLM

from talentrl_core.config import ModelConfig, SFTConfig
from talentrl_core.generation import TransformersGenerator
from talentrl_core.models import build_tiny, load_model, train_tokenizer
from talentrl_core.prompts import CHAT_TEMPLATE_KWARGS, TalentView, format_talent, routing_messages
from talentrl_core.rl.samples import Sample, chat_prompt_ids, completion_ids_of, score_completions
from talentrl_core.policies import LLMPolicy, PolicyInput
from talentrl_core.sft import SFTData, tokenize_sample, train_sft

TEMPLATES = Path(trl.__file__).parent / "chat_templates"
BACKBONES = {
    # template file, end-of-turn (eos) token, extra special tokens the template writes
    "qwen2_5": ("qwen2_5.jinja", "<|im_end|>", []),
    "qwen3": ("qwen3.jinja", "<|im_end|>", ["<think>", "</think>"]),
    "llama3_1": ("llama3_1.jinja", "<|eot_id|>", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]),
}
TINY = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                   intermediate_size=64, vocab_size=600, max_position_embeddings=512, device="cpu")
ROUTE = [{"role": "system", "content": "You play a text game."},
         {"role": "user", "content": "Task: find the coin.\nChoose a strategy:\nT1: Explore\nT2: Follow"},
         {"role": "assistant", "content": "<talent>T2</talent>"}]


EXEC = [{"role": "system", "content": "You play a text game."},
        {"role": "user", "content": "Task: find the coin.\nObs: a closet. Exits: east, north."},
        {"role": "assistant", "content": "<action>go east</action>"}]


def backbone_tokenizer(name: str):
    template, eos, extra = BACKBONES[name]
    fast = train_tokenizer(["You play a text game. Task: find the coin. go east go north take coin " * 20], 400)
    fast.add_special_tokens({"additional_special_tokens": extra + [eos]})
    fast.eos_token = eos
    fast.chat_template = (TEMPLATES / template).read_text()
    assert "{% generation %}" not in fast.chat_template and "{%- generation" not in fast.chat_template
    return fast


@pytest.fixture(scope="module", params=sorted(BACKBONES))
def tok(request):
    return backbone_tokenizer(request.param)


@pytest.fixture(scope="module", params=sorted(BACKBONES) + ["chatml"])
def model_dir(request, tmp_path_factory, shared_data) -> Path:
    """A saved random-initialised tiny Qwen2 with a backbone's tokenizer and template ("chatml": our own tiny model,
    whose template has ``{% generation %}`` markers)."""
    out = tmp_path_factory.mktemp(request.param)
    if request.param == "chatml":
        return build_tiny(TINY, out / "m", shared_data)
    fast = backbone_tokenizer(request.param)
    config = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    fast.save_pretrained(out)
    return out


def _label(tok, sample) -> str:
    return tok.decode([i for i, m in zip(sample["input_ids"], sample["assistant_masks"]) if m])


def test_mask_is_exactly_what_the_model_generates(tok):
    s = tokenize_sample(tok, ROUTE, 10_000)
    label = _label(tok, s)
    # exactly the reply and the end of turn: Qwen3's empty <think></think> block sits in the prompt (thinking mode
    # off, prompts.CHAT_TEMPLATE_KWARGS), so the label is what the constrained action/talent trie allows
    assert label == "<talent>T2</talent>" + tok.eos_token, label
    prompt = tok.apply_chat_template(ROUTE[:-1], tokenize=True, return_dict=True, add_generation_prompt=True,
                                     **CHAT_TEMPLATE_KWARGS)["input_ids"]
    first = s["assistant_masks"].index(1)
    assert s["input_ids"][:first] == list(prompt)  # everything before the label is the inference prompt
    assert sum(s["assistant_masks"]) == len(s["input_ids"]) - first - (len(s["input_ids"]) - 1 - max(
        i for i, m in enumerate(s["assistant_masks"]) if m))  # one contiguous span
    assert "Choose a strategy" not in label and "system" not in label


def test_every_assistant_turn_of_a_multi_turn_sample_is_labelled(tok):
    msgs = ROUTE + [{"role": "user", "content": "Obs: a closet."}, {"role": "assistant", "content": "<action>go east</action>"}]
    if "reasoning_content" in tok.chat_template:  # Qwen3 re-renders earlier turns: only the final turn is prefix-stable
        with pytest.raises(ValueError, match="not prefix-preserving"):
            tokenize_sample(tok, msgs, 10_000)
        return
    label = _label(tok, tokenize_sample(tok, msgs, 10_000))
    assert "<talent>T2</talent>" in label and label.endswith("<action>go east</action>" + tok.eos_token)
    assert "closet" not in label


def test_long_prompt_is_cut_from_the_start_label_kept(tok):
    msgs = [ROUTE[0], {"role": "user", "content": "Obs: a long room description. " * 60}, ROUTE[2]]
    cut = tokenize_sample(tok, msgs, 48)
    assert len(cut["input_ids"]) == 48 and _label(tok, cut).endswith("<talent>T2</talent>" + tok.eos_token)


@pytest.mark.parametrize("msgs", [ROUTE, EXEC], ids=["route", "exec"])
def test_rl_samples_score_exactly_the_sft_label(tok, msgs):
    """An RL sample (prompt with generation prompt, reply + eos) is token for token the SFT sample, and its
    completion is exactly the SFT loss mask."""
    s = tokenize_sample(tok, msgs, 10_000)
    prompt, completion = chat_prompt_ids(tok, msgs[:-1]), completion_ids_of(tok, msgs[-1]["content"])
    first = s["assistant_masks"].index(1)
    assert s["input_ids"][:first] == prompt
    assert [i for i, m in zip(s["input_ids"], s["assistant_masks"]) if m] == completion
    assert s["input_ids"][first:first + len(completion)] == completion


def test_a_few_sft_steps_lower_the_loss_and_keep_the_template(model_dir, tmp_path):
    samples = [{"messages": ROUTE, "kind": "route"}, {"messages": EXEC, "kind": "exec"}] * 8
    cfg = SFTConfig(max_steps=8, lr=3e-3, warmup_steps=1, batch_size=4, save_steps=100)
    info = train_sft(SFTData(samples), str(model_dir), tmp_path / "sft", cfg, TINY)
    assert info["steps"] == 8 and info["last_logged_loss"] < info["first_logged_loss"]
    _, before = load_model(model_dir)
    _, after = load_model(tmp_path / "sft")
    assert after.chat_template == before.chat_template  # the backbone's own template is kept, never replaced


@pytest.mark.parametrize("decoding", ["constrained", "free"])
def test_rollout_logprobs_equal_training_scores_in_both_decoding_modes(model_dir, decoding):
    """Routing is decoded under the menu in both modes, and every sampled completion's behaviour log-probs are
    what the trainer recomputes for it (issue 15: the optimised routing policy is the evaluated one)."""
    model, tok = load_model(model_dir)
    model.eval()
    policy = LLMPolicy(TransformersGenerator(model, tok), tok, max_new_tokens=12, temperature=1.0,
                       constrained=decoding == "constrained")
    menu = [TalentView(f"t{i}", f"talent {i}", "when", "how", label=f"T{i}") for i in (1, 2, 3)]
    route_msgs = routing_messages("textworld", "find the coin", menu)
    allowed_route = [format_talent(t.shown) for t in menu]
    allowed_exec = ["<action>go east</action>", "<action>take coin</action>"]
    items = [PolicyInput("route", route_msgs, allowed_route, seed=s) for s in range(4)]
    items += [PolicyInput("exec", EXEC[:-1], allowed_exec, seed=10 + s) for s in range(3)]
    vocab = model.get_output_embeddings().weight.shape[0]
    for it, o in zip(items, policy.complete(items)):
        if it.kind == "route":
            assert o.text in allowed_route  # free decoding too: the menu constrains routing
        constrained = it.kind == "route" or decoding == "constrained"
        ids = completion_ids_of(tok, o.text) if constrained else list(o.token_ids)
        assert ids == list(o.token_ids)
        sample = Sample(it.kind, chat_prompt_ids(tok, it.messages), ids, [], it.allowed if constrained else None)
        assert score_completions(model, tok, [sample], vocab, 1.0)[0] == pytest.approx(list(o.logprobs), abs=1e-4)
