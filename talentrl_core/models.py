"""Model factory: a tiny Qwen2 built locally (CPU, offline) or any Hugging Face causal LM (GPU).

``model.kind=tiny`` trains a byte-level BPE tokenizer with the ``tokenizers`` library on text from the
shared data (ALFWorld grammar and trajectories, QA questions) plus the prompts' fixed text, using Qwen's
own pre-tokenization pipeline (NFC + Split(regex) + ByteLevel(use_regex=False)) — transformers 5 rebuilds
that pipeline when it reloads a qwen2 tokenizer, so training with anything else reloads with other ids
(ECOSYSTEM.md). The chat template is ChatML with ``{% generation %}`` markers so assistant-only loss works.
Weights are random (seeded): nothing is downloaded.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterable, Optional

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from .config import ModelConfig, ModelKind
from .io import atomic_dir
from .prompts import RULES

# Qwen2's pre-tokenizer regex (transformers/models/qwen2/tokenization_qwen2.py).
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Protocol tags as single tokens: cheaper prompts and a clean constrained-decoding trie.
TAG_TOKENS = [f"<{t}>" for t in ("think", "action", "talent", "search", "answer", "information")] + [
    f"</{t}>" for t in ("think", "action", "talent", "search", "answer", "information")
]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}{{- '\n' }}"
    "{%- else %}"
    "{{- message['content'] + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


def tokenizer_corpus(data_dir: str | Path, extra_texts: Iterable[str] = (), seed: int = 0, max_docs: int = 20000) -> list[str]:
    """Text for the tokenizer: ALFWorld grammar + trajectories, QA questions, prompt rules, extra texts.

    Read only from the manifest's files (``benchdata.tokenizer_entries``), each verified present with its sha256
    first: a folder with any of them missing or different raises (DataMissing / DataCorrupt naming each file and
    ``make data``) instead of training on less text than the documented runs. Deterministic for a seed: files are
    read in sorted order and sub-sampled with ``random.Random(seed)``.
    """
    from .benchdata import require, tokenizer_entries

    entries = tokenizer_entries()
    files = require(Path(data_dir), entries, purpose="the tiny model's tokenizer")
    texts: list[str] = list(RULES.values())
    qa_docs: list[str] = []
    for e, f in zip(entries, files):
        if not e.path.startswith("qa/"):  # ALFWorld's grammar, the trajectories: whole files
            texts.append(f.read_text(errors="replace")[:3_000_000])
            continue
        for line in f.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            q = row.get("question") or row.get("Question") or ""
            if q:
                qa_docs.append(str(q))
    rng = random.Random(seed)
    if len(qa_docs) > max_docs:
        qa_docs = rng.sample(qa_docs, max_docs)
    texts.extend(qa_docs)
    texts.extend(extra_texts)
    return texts


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.add_tokens(TAG_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(cfg: ModelConfig, out_dir: str | Path, data_dir: str | Path, extra_texts: Iterable[str] = ()) -> Path:
    """Build (tokenizer + random-init Qwen2) and save it atomically to ``out_dir``. Deterministic per seed."""
    out_dir = Path(out_dir)
    tokenizer = train_tokenizer(tokenizer_corpus(data_dir, extra_texts, seed=cfg.seed), cfg.vocab_size)
    model = tiny_qwen2(cfg, len(tokenizer), bos_token_id=None,
                       eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = model.config.eos_token_id
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "talentrl_model.json").write_text(json.dumps(tiny_spec(cfg), indent=2))
    return out_dir


def tiny_qwen2(cfg: ModelConfig, vocab_size: int, **config) -> Qwen2ForCausalLM:
    """The tiny model of ``cfg``'s sizes (output head tied to the embeddings), random weights seeded by ``cfg.seed``:
    what ``build_tiny`` saves and ``bench/`` times. ``config``: further ``Qwen2Config`` fields (token ids,
    ``attn_implementation``)."""
    torch.manual_seed(cfg.seed)
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True, **config))


def tiny_spec(cfg: ModelConfig) -> dict:
    """What determines a tiny base model: a built model whose recorded spec differs is rebuilt."""
    return {"kind": "tiny", "seed": cfg.seed, "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
            "max_position_embeddings": cfg.max_position_embeddings}


def weights_digest(model) -> str:
    """sha256 of a model's weights (names and float32 values, in name order): equal only for equal weights."""
    import hashlib

    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_tokenizer(path: str | Path):
    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok


_BUILDERS = {"sft": "sft", "base": "sft", "rl": "rl", "flat_grpo": "rl"}


def _builder_hint(path: Path) -> str:
    stage = _BUILDERS.get(path.name)
    return f" (`python -m pipeline.run {stage} ...` or `make demo` builds it)" if stage else ""


def check_model_path(path: str | Path) -> bool:
    """True when ``path`` names a local folder (then it must hold a model: else FileNotFoundError naming it and the
    stage that writes it); False for a Hugging Face id (``org/name``), left to ``from_pretrained``."""
    p = Path(path)
    local = (p.exists() or p.is_absolute() or str(path).startswith(".") or len(p.parts) > 2
             or (len(p.parts) == 2 and Path(p.parts[0]).exists()))
    if local and not (p / "config.json").exists():
        what = "does not exist" if not p.exists() else "holds no model (no config.json)"
        raise FileNotFoundError(f"{p}: {what}{_builder_hint(p)}")
    return local


def load_model(path: str | Path, cfg: Optional[ModelConfig] = None, device: Optional[str] = None):
    """Load (model, tokenizer) from a folder or a Hub id (the latter needs the files cached locally when offline)."""
    dtype = getattr(torch, cfg.dtype) if cfg else torch.float32
    local = check_model_path(path)
    dev = resolve_device(device or (cfg.device if cfg else "cpu"))
    # auto: transformers' default, sdpa (on a CPU 3.7x eager at 2,048 tokens: docs/performance.md)
    attn = cfg.attn_implementation if cfg and cfg.attn_implementation != "auto" else None
    kwargs = {"attn_implementation": attn} if attn else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **kwargs)
    except Exception as e:  # noqa: BLE001 - safetensors, torch and json raise several types for a damaged folder
        if not local:
            raise
        files = sorted(p.name for p in Path(path).glob("*.safetensors")) or ["config.json"]
        raise ValueError(f"{Path(path) / files[0]}: the model in {path} cannot be loaded ({type(e).__name__}: "
                         f"{str(e)[:200]}); re-run the stage that writes it{_builder_hint(Path(path))}") from e
    model.to(dev)
    return model, load_tokenizer(path)


def ensure_base_model(cfg: ModelConfig, base_dir: str | Path, data_dir: str | Path, extra_texts: Iterable[str] = ()) -> str:
    """The base model's location: built once under ``base_dir`` for tiny, ``name_or_path`` for hf."""
    if cfg.kind == ModelKind.hf:
        return cfg.name_or_path
    base_dir = Path(base_dir)
    spec_file = base_dir / "talentrl_model.json"
    built = json.loads(spec_file.read_text()) if spec_file.exists() and (base_dir / "config.json").exists() else None
    if built != tiny_spec(cfg):  # missing, or built for another architecture/seed: (re)build atomically
        build_tiny(cfg, base_dir, data_dir, extra_texts)
    return str(base_dir)
