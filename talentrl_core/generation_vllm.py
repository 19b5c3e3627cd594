"""vLLM rollouts (GPU extra): the offline engine as a ``generation.Generator``, with the weight sync RL needs.

Untested here (no GPU on the machines this project's CI runs on); docs/STATUS.md says so.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

from .generation import GenRequest, GenResult


def _load_worker_weights(worker, weights) -> None:  # pragma: no cover - GPU only
    """Runs on vLLM's worker (``LLM.collective_rpc``): load the trainer's tensors into the served model."""
    worker.model_runner.model.load_weights(weights=weights)


class VLLMGenerator:
    """vLLM offline engine (GPU extra; install `talentrl[gpu]` into a fresh CUDA environment).

    What the trainer relies on, through public vLLM APIs of the pinned range (``vllm>=0.22,<=0.31``):

    - **constrained decoding**: a request's ``allowed`` completions become a structured-output *choice*
      (``SamplingParams(structured_outputs=StructuredOutputsParams(choice=...))``): routing picks exactly one
      menu entry and, with ``model.decoding=constrained``, an action exactly one admissible command;
    - **log-probs as trained**: the engine returns *processed* log-probs (``logprobs_mode="processed_logprobs"``:
      after temperature and the structured-output mask), which is what ``rl.samples`` recomputes; the raw
      mode would match training only at temperature 1;
    - **weight sync**: ``LLM.collective_rpc`` runs the load on the engine's worker and ``reset_prefix_cache``
      drops KV blocks computed with the old weights. The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
      so the trainer's tensors are handed over, not pickled; tensor parallelism above 1 is refused for RL.

    Untested here (no GPU on the machines this project's CI runs on); docs/STATUS.md says so.
    """

    def __init__(self, model_path: str, tokenizer, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.5):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
        except ImportError as e:  # pragma: no cover - GPU only
            raise ImportError("model.backend=vllm needs the gpu extra in a fresh CUDA environment: pip install 'talentrl[gpu]'") from e
        self.tp = tensor_parallel_size
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size,
                       gpu_memory_utilization=gpu_memory_utilization, logprobs_mode="processed_logprobs")
        self.tok = tokenizer

    @staticmethod
    def sampling_kwargs(allowed: Optional[Sequence[str]]) -> dict:
        """The structured-output constraint of one request (empty when decoding is free)."""
        if not allowed:
            return {}
        try:
            from vllm.sampling_params import StructuredOutputsParams
        except ImportError as e:  # pragma: no cover - GPU only
            raise RuntimeError("constrained decoding with model.backend=vllm needs vLLM's StructuredOutputsParams "
                               "(vLLM >= 0.12; the gpu extra pins 0.22-0.31), or set model.decoding=free") from e
        return {"structured_outputs": StructuredOutputsParams(choice=list(allowed))}

    def generate(self, requests: Sequence[GenRequest], max_new_tokens: int, temperature: float) -> list[GenResult]:  # pragma: no cover - GPU only
        from vllm import SamplingParams, TokensPrompt

        params = [
            SamplingParams(max_tokens=max_new_tokens, temperature=temperature, seed=r.seed, logprobs=0,
                           **self.sampling_kwargs(r.allowed))
            for r in requests
        ]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=r.prompt_ids) for r in requests], params)
        res = []
        for r, o in zip(requests, outs):
            c = o.outputs[0]
            lps = [d[t].logprob for t, d in zip(c.token_ids, c.logprobs or [])]
            res.append(GenResult(text=c.text, token_ids=list(c.token_ids), prompt_tokens=len(r.prompt_ids), logprobs=lps))
        return res

    def load_weights(self, model) -> None:  # pragma: no cover - GPU only
        if self.tp > 1:
            raise NotImplementedError("RL weight sync into vLLM with tensor_parallel_size > 1 is not supported: "
                                      "use tensor_parallel_size=1 or model.backend=transformers for rollouts")
        weights = list(model.state_dict().items())
        self.llm.collective_rpc(_load_worker_weights, args=(weights,))
        self.llm.reset_prefix_cache()

    def sync_from(self, model, lora: bool) -> None:  # pragma: no cover - GPU only
        """After an RL update: push the trained weights into the engine (the transformers backend shares the
        model and has no such method). LoRA: merge, push the base parameter names, unmerge."""
        if not lora:
            self.load_weights(model)
            return
        model.merge_adapter()
        try:
            self.load_weights(_MergedLoRA(model))
        finally:
            model.unmerge_adapter()


class _MergedLoRA:  # pragma: no cover - GPU only
    """A merged PEFT model seen as the plain model vLLM serves: base parameter names, no adapter tensors."""

    def __init__(self, model):
        self.model = model

    def state_dict(self) -> dict:
        return {k.replace("base_model.model.", "").replace(".base_layer", ""): v
                for k, v in self.model.state_dict().items() if "lora_" not in k}
