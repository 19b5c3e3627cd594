"""The ``model`` section: which policy model, on which device and dtype, and how it generates (``ModelConfig``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .checks import AT_LEAST_1, NON_NEGATIVE, check_ranges

ATTN_CHOICES = ("auto", "eager", "sdpa", "flash_attention_2", "flex_attention")


class ModelKind(StrEnum):
    tiny = "tiny"
    hf = "hf"



class Backend(StrEnum):
    transformers = "transformers"
    vllm = "vllm"
    openai = "openai"



class Decoding(StrEnum):
    free = "free"
    constrained = "constrained"



@dataclass
class ModelConfig:
    kind: ModelKind = ModelKind.tiny
    "tiny: a Qwen2 model built locally from the sizes below; hf: any HF path or Hub id."
    name_or_path: str = ""
    "For kind=hf: a local path or Hub id. For tiny: ignored (built under artifacts/models/base)."
    hidden_size: int = 128
    "Tiny model width."
    num_hidden_layers: int = 4
    "Tiny model depth."
    num_attention_heads: int = 4
    "Attention heads."
    num_key_value_heads: int = 2
    "Key/value heads (grouped-query attention)."
    intermediate_size: int = 384
    "MLP width."
    vocab_size: int = 2048
    "Tokenizer vocabulary size (BPE trained offline on the environments' text)."
    max_position_embeddings: int = 1024
    "Context length."
    seed: int = 0
    "Seed for weight init and tokenizer corpus sampling; two builds with one seed are identical."
    dtype: str = "float32"
    "Weights dtype: float32, bfloat16 or float16."
    device: str = "cpu"
    "cpu, cuda, cuda:<index>, mps or auto (cuda when there is one)."
    threads: int = 0
    ("CPU compute threads: 0 follows the CPUs free of other processes' work (re-measured every 2 s, threads.py); N "
     "fixes N (OMP_NUM_THREADS in the environment also fixes it).")
    compute_dtype: str = "auto"
    "Autocast dtype of the matmuls (weights stay in ``dtype``): auto (bfloat16 where the CPU/GPU runs it natively), float32, bfloat16."
    attn_implementation: str = "auto"
    "Attention kernel: auto (transformers' default, sdpa: on a CPU 4.4x eager's speed at 2,048 tokens,\n    bench/bench_alloc.py), eager, sdpa, flash_attention_2, flex_attention."
    backend: Backend = Backend.transformers
    "Generation backend for rollouts."
    openai_base_url: str = ""
    "Base URL of an OpenAI-compatible endpoint when backend=openai."
    openai_api_key_env: str = "OPENAI_API_KEY"
    "Name of the environment variable that holds the endpoint key (never logged)."
    decoding: Decoding = Decoding.constrained
    "free generation, or constrained to admissible actions where the env lists them."
    max_new_tokens: int = 32
    "New tokens per generated turn."
    temperature: float = 1.0
    "Sampling temperature (greedy when 0)."
    lora: bool = False
    "Train LoRA adapters (peft) instead of full weights."
    lora_r: int = 16
    "LoRA rank."

    def __post_init__(self) -> None:
        if self.kind == ModelKind.hf and not self.name_or_path:
            raise ValueError("model.kind=hf needs model.name_or_path (a local path or Hub id)")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("model.hidden_size must be divisible by model.num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("model.num_attention_heads must be divisible by model.num_key_value_heads")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"model.dtype={self.dtype!r}: choose float32, bfloat16 or float16")
        if self.compute_dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"model.compute_dtype={self.compute_dtype!r}: choose auto, float32 or bfloat16")
        if self.attn_implementation not in ATTN_CHOICES:
            raise ValueError(f"model.attn_implementation={self.attn_implementation!r}: choose {', '.join(ATTN_CHOICES)}")
        if self.device not in ("auto", "cpu", "cuda", "mps") and not self.device.startswith("cuda:"):
            raise ValueError(f"model.device={self.device!r}: choose auto, cpu, cuda, cuda:<index> or mps")
        check_ranges("model", self, temperature=NON_NEGATIVE, max_new_tokens=AT_LEAST_1)
        if self.backend == Backend.openai and self.decoding == Decoding.constrained:
            raise ValueError("model.backend=openai with model.decoding=constrained: an OpenAI-compatible endpoint takes no "
                             "token mask, so the admissible actions would not constrain it; set model.decoding=free")
        if self.kind == ModelKind.tiny:  # the byte-level BPE needs its 256 bytes and the special tokens
            check_ranges("model", self, vocab_size=(">= 512 for the tiny model's byte-level tokenizer", lambda v: v >= 512),
                         max_position_embeddings=(">= 256: shorter contexts cut every prompt", lambda v: v >= 256))
