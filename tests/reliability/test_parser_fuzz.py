"""Parser fuzz: 10,000 random inputs per parser built from the tags they look for; none may raise anything but its
documented error, and floods of unclosed tags parse in linear time (their result is checked, not their speed)."""

from __future__ import annotations

import json
import random

import pytest

from talentrl_core.envs.qa.serving import RetrievalServerError, parse_retrieve_response
from talentrl_core.library.distill_teacher import extract_json
from talentrl_core.prompts import parse_action, parse_qa, parse_talent

PIECES = ["<action>", "</action>", "<talent>", "</talent>", "<search>", "</search>", "<answer>", "</answer>", "<think>",
          "</think>", "go east", " ", "\n", "T1", "{", "}", "[", "]", '"a":', "1", ",", "```json", "<", ">", "/", "é", "\x00"]
N = 10_000


def _texts(seed: int):
    rng = random.Random(seed)
    for _ in range(N):
        yield "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40)))


@pytest.mark.parametrize("parser", [parse_action, parse_talent, parse_qa])
def test_tag_parsers_never_raise(parser):
    for text in _texts(sum(map(ord, parser.__name__))):
        out = parser(text)
        assert out is None or isinstance(out, str)


def test_tag_parsers_agree_with_their_definition_on_clean_input():
    assert parse_action("<think>x</think><action>go east</action><action>take coin</action>") == "take coin"
    assert parse_talent("<talent>T1</talent> <talent> T2 </talent>") == "T2"
    assert parse_qa("<think>a</think><answer> Paris </answer><search>q</search>") == "<answer>Paris</answer>"
    assert parse_action("<action>" * 200_000) is None and parse_qa("<search>" * 100_000 + "<answer>x") is None
    assert parse_action("<action>" * 100_000 + "<action>go</action>") == "go"


def test_extract_json_raises_only_value_error():
    for text in _texts(7):
        try:
            assert isinstance(extract_json(text), dict)
        except ValueError:
            pass
    with pytest.raises(ValueError):
        extract_json('{"a":' * 50_000 + "1" + "}" * 50_000)  # deeper than the parser's recursion limit


def test_retrieve_response_raises_only_its_error():
    rng = random.Random(3)
    leaves = [None, 1, "x", [], {}, {"id": 1}, {"id": "1", "contents": "c"}, {"document": 5}, {"document": {"id": 2}}]

    def value(depth=0):
        if depth > 2 or rng.random() < 0.4:
            return rng.choice(leaves)
        return [value(depth + 1) for _ in range(rng.randint(0, 3))] if rng.random() < 0.5 else \
            {rng.choice(["result", "document", "id", "score"]): value(depth + 1)}

    for _ in range(N):
        body = {"result": value()} if rng.random() < 0.7 else value()
        try:
            out = parse_retrieve_response(json.loads(json.dumps(body)), rng.randint(0, 2))
            assert isinstance(out, list)
        except RetrievalServerError:
            pass
