"""Are an option value's tokens in the memory line the tokens its click command writes? (issue 40, P7)

For every option value of the catalogue: the value's tokens in ``<action>click[<value>]</action>`` (after ``[``),
and whether they stand as a run in the memory line ``size: none (task: <value>)`` (``env.memory_values=text``) and
in ``size: none (task: [<value>])`` (``command``). Printed per option group (color, size, all).

    .venv/bin/python docs/results/webshop/value_tokens.py <model dir with tokenizer.json> [<catalogue jsonl>]

Run 2026-12-07 on /work/runs/ws_p6/models/base (the seeded tiny model's tokenizer every WebShop arm trains with,
tokenizer.json sha1 1ad2187e77b254743823242b9a431bf971a6c245): color 222 / 1,169 text, 1,169 / 1,169 command;
size 475 / 601, 601 / 601; all 1,945 values 734 text, 1,945 command.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from tokenizers import Tokenizer


def within(part: list[int], whole: list[int]) -> bool:
    return any(whole[i:i + len(part)] == part for i in range(len(whole) - len(part) + 1))


def main(model_dir: str, catalogue: str = "../shared/data/webshop/minimal_documents_1000.jsonl") -> None:
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    values: dict[str, set[str]] = defaultdict(set)
    with open(catalogue, encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            for name, vals in ((doc.get("product", doc).get("options")) or {}).items():
                values[" ".join(name.lower().split())].update(" ".join(v.lower().split()) for v in vals)
    values["all"] = set().union(*values.values())
    for group in ("color", "size", "all"):
        found = {"text": 0, "command": 0}
        for v in values[group]:
            enc = tok.encode(f"<action>click[{v}]</action>")
            bracket = enc.tokens.index("[")  # a value never merges with the bracket under this tokenizer
            ids = enc.ids[bracket + 1:-2]
            found["text"] += within(ids, tok.encode(f"size: none (task: {v})").ids)
            found["command"] += within(ids, tok.encode(f"size: none (task: [{v}])").ids)
        print(f"{group}: {len(values[group])} values; the command's value tokens in the line: "
              f"text {found['text']}, command {found['command']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
