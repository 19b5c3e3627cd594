"""SFT loss masks under the official chat templates of real backbones (issue 15): Qwen2.5, Qwen3, Llama-3.1.

The templates are the originals TRL ships for identity comparison (``trl/chat_templates/*.jinja``, Apache-2.0,
copied by TRL from the models' Hub repositories): read from the installed TRL, never downloaded. None has
``{% generation %}`` markers, so the mask comes from rendering each assistant turn with and without it.
The tokenizer is a small BPE trained here, with the backbones' special tokens and end-of-turn token.
"""

from pathlib import Path

import pytest
import trl

from talentrl_core.models import train_tokenizer
from talentrl_core.prompts import CHAT_TEMPLATE_KWARGS
from talentrl_core.sft import tokenize_sample

TEMPLATES = Path(trl.__file__).parent / "chat_templates"
BACKBONES = {
    # template file, end-of-turn (eos) token, extra special tokens the template writes
    "qwen2_5": ("qwen2_5.jinja", "<|im_end|>", []),
    "qwen3": ("qwen3.jinja", "<|im_end|>", ["<think>", "</think>"]),
    "llama3_1": ("llama3_1.jinja", "<|eot_id|>", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]),
}
ROUTE = [{"role": "system", "content": "You play a text game."},
         {"role": "user", "content": "Task: find the coin.\nChoose a strategy:\nT1: Explore\nT2: Follow"},
         {"role": "assistant", "content": "<talent>T2</talent>"}]


@pytest.fixture(scope="module", params=sorted(BACKBONES))
def tok(request):
    name, eos, extra = BACKBONES[request.param]
    fast = train_tokenizer(["You play a text game. Task: find the coin. go east go north take coin " * 20], 400)
    fast.add_special_tokens({"additional_special_tokens": extra + [eos]})
    fast.eos_token = eos
    fast.chat_template = (TEMPLATES / name).read_text()
    assert "{% generation %}" not in fast.chat_template and "{%- generation" not in fast.chat_template
    return fast


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
