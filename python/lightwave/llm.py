"""LLM: a model on this machine's GPU (or the emulator) behind one continuous-batching engine."""

from __future__ import annotations

import numbers
import os
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _lightwave
from .outputs import CompletionOutput, RequestOutput, completion
from .params import SamplingParams

Prompt = Union[str, Sequence[int]]
Message = Dict[str, str]


class LLM:
    """A model opened for generation: a Hugging Face model directory or a GGUF file.

    All the prompts of one generate() or chat() call go to the engine together and run in the
    same batches (continuous batching over a paged KV cache with prefix caching). The weights
    are loaded, and the engine steps, with the GIL released.

    dtype: the compute dtype, "bf16", "f16" or "f32" ("auto": bf16). max_num_seqs: sequences
    per engine step. kv_cache_fraction: the share of the device memory left after the weights
    that the KV cache takes (num_kv_blocks > 0 gives the block count instead).
    max_num_batched_tokens: tokens per step (decode tokens plus prefill chunks).
    tensor_parallel_size: GPUs the model is split over. deterministic: batch-invariant execution,
    so that a request's logits and tokens do not depend on the other requests it runs with, on
    prefix-cache hits or on chunked prefill (slower). kv_cache_dtype: "auto" (the model's dtype),
    "fp8" (E4M3 with a scale per key/value head) or "int8" (a scale per token and head): 8-bit
    caches hold twice the tokens. A missing or unusable model raises LightwaveError naming the
    file.
    """

    def __init__(
        self,
        model: Union[str, os.PathLike],
        *,
        dtype: str = "bf16",
        max_num_seqs: int = 256,
        kv_cache_fraction: float = 0.9,
        max_num_batched_tokens: int = 2048,
        block_size: int = 16,
        num_kv_blocks: int = 0,
        enable_prefix_caching: bool = True,
        tensor_parallel_size: int = 1,
        device: int = 0,
        deterministic: bool = False,
        kv_cache_dtype: str = "auto",
    ) -> None:
        self._engine = _lightwave.Engine(
            os.fspath(model),
            dtype="bf16" if dtype == "auto" else dtype,
            tensor_parallel_size=tensor_parallel_size,
            device=device,
            max_num_seqs=max_num_seqs,
            kv_cache_fraction=kv_cache_fraction,
            max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size,
            num_kv_blocks=num_kv_blocks,
            enable_prefix_caching=enable_prefix_caching,
            deterministic=deterministic,
            kv_cache_dtype=kv_cache_dtype,
        )
        self._tokenizer = self._engine.tokenizer()

    def get_tokenizer(self) -> _lightwave.Tokenizer:
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def num_kv_blocks(self) -> int:
        return self._engine.num_kv_blocks

    def stats(self) -> Dict[str, int]:
        """The engine's counters: steps, prompt/generated tokens, prefix-cache hits, ..."""
        return self._engine.stats()

    def generate(
        self,
        prompts: Union[Prompt, Sequence[Prompt]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
    ) -> List[RequestOutput]:
        """Completes each prompt (text, or a list of token ids), all in one batch.

        sampling_params: one for every prompt, or a list with one per prompt. Returns one
        RequestOutput per prompt, in order, each with SamplingParams.n completions.
        """
        return self._run(self._prompts(prompts), sampling_params)

    def chat(
        self,
        messages: Union[Sequence[Message], Sequence[Sequence[Message]]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        add_generation_prompt: bool = True,
        allow_special_in_content: bool = False,
    ) -> List[RequestOutput]:
        """Answers a conversation ([{"role": ..., "content": ...}, ...]) or a list of them,
        rendered with the model's chat template. The messages' text is tokenized as plain text
        (a message that spells "<|im_start|>" cannot open a turn) unless
        allow_special_in_content, for trusted callers."""
        return self._run(self._conversations(messages, add_generation_prompt, allow_special_in_content), sampling_params)

    def generate_stream(self, prompt: Prompt, sampling_params: Optional[SamplingParams] = None) -> "CompletionStream":
        """Streams one completion of `prompt`: an iterator of CompletionOutputs each holding
        what one engine step added (text and token ids); the last has the finish_reason.
        The request is checked and queued at once; closing the stream cancels it."""
        prompts = self._prompts(prompt)
        if len(prompts) != 1:
            raise ValueError(f"generate_stream takes one prompt, got {len(prompts)}")
        return self._stream(prompts[0][1], sampling_params)

    def chat_stream(
        self,
        messages: Sequence[Message],
        sampling_params: Optional[SamplingParams] = None,
        *,
        add_generation_prompt: bool = True,
        allow_special_in_content: bool = False,
    ) -> "CompletionStream":
        """generate_stream for one conversation."""
        ((_, ids),) = self._conversations([list(messages)], add_generation_prompt, allow_special_in_content)
        return self._stream(ids, sampling_params)

    # Prompts as (text or None, token ids).
    def _prompts(self, prompts: Union[Prompt, Sequence[Prompt]]) -> List[Tuple[Optional[str], List[int]]]:
        if isinstance(prompts, str):
            prompts = [prompts]
        elif prompts and _is_ids(prompts):
            prompts = [prompts]
        out = []
        for p in prompts:
            if isinstance(p, str):
                out.append((p, self._tokenizer.encode(p)))
            elif _is_ids(p):
                out.append((None, [int(t) for t in p]))
            else:
                raise TypeError(f"a prompt must be a str or a list of token ids, got {type(p).__name__}")
        return out

    def _conversations(self, messages, add_generation_prompt: bool, allow_special_in_content: bool) -> List[Tuple[str, List[int]]]:
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        out = []
        for c in conversations:
            text = self._tokenizer.apply_chat_template(c, add_generation_prompt=add_generation_prompt)
            ids = self._tokenizer.apply_chat_template(c, add_generation_prompt=add_generation_prompt, tokenize=True,
                                                      allow_special_in_content=allow_special_in_content)
            out.append((text, ids))
        return out

    def _run(self, prompts, sampling_params) -> List[RequestOutput]:
        params = _params_per_prompt(sampling_params, len(prompts))
        added: List[Tuple[int, int]] = []  # (prompt index, request id)
        try:
            for i, ((_, ids), sp) in enumerate(zip(prompts, params)):
                for r in sp._requests(ids):
                    added.append((i, self._engine.add(r)))
        except BaseException:
            for _, rid in added:
                self._engine.cancel(rid)
            raise
        outs = self._engine.run([rid for _, rid in added])
        results = [
            RequestOutput(request_id=str(rid), prompt=text, prompt_token_ids=list(ids), outputs=[])
            for (text, ids), rid in zip(prompts, _first_ids(added, len(prompts)))
        ]
        for (i, _), out in zip(added, outs):
            results[i].outputs.append(completion(len(results[i].outputs), out, params[i].logprobs))
        return results

    def _stream(self, ids: List[int], sampling_params: Optional[SamplingParams]) -> "CompletionStream":
        sp = sampling_params or SamplingParams()
        if sp.n != 1:
            raise ValueError(f"a stream carries one completion; SamplingParams.n is {sp.n}")
        (request,) = sp._requests(ids)
        return CompletionStream(self._engine, self._engine.add(request), sp.logprobs)


class CompletionStream:
    """The completion of one request as it is generated (LLM.generate_stream). Iterating steps
    the engine (every request in it advances); each item is what the request gained, as a
    CompletionOutput. close(), leaving a `with` block, or garbage collection cancels an
    unfinished request."""

    def __init__(self, engine: _lightwave.Engine, request_id: int, logprobs: Optional[int]) -> None:
        self._engine = engine
        self.request_id = request_id
        self._logprobs = logprobs
        self._done = False

    def __iter__(self) -> Iterator[CompletionOutput]:
        return self

    def __next__(self) -> CompletionOutput:
        if self._done:
            raise StopIteration
        out = self._engine.next(self.request_id)
        self._done = out.finished
        return completion(0, out, self._logprobs)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._engine.cancel(self.request_id)

    def __enter__(self) -> "CompletionStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _is_ids(p) -> bool:
    return isinstance(p, (list, tuple)) and all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in p)


def _params_per_prompt(sampling_params, n: int) -> List[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * n
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * n
    params = list(sampling_params)
    if len(params) != n:
        raise ValueError(f"{len(params)} SamplingParams for {n} prompts")
    return params


def _first_ids(added: List[Tuple[int, int]], n: int) -> List[int]:
    first: Dict[int, int] = {}
    for i, rid in added:
        first.setdefault(i, rid)
    return [first[i] for i in range(n)]
