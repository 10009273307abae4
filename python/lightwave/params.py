"""SamplingParams: how to sample the completions of one prompt."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import List, Optional, Union

from . import _lightwave


@dataclass
class SamplingParams:
    """How to sample the completions of one prompt; names and defaults follow vLLM's.

    temperature 0 is greedy. top_k 0 (or -1) keeps every token, top_p 1 and min_p 0 are off.
    seed fixes the random stream: the same seed gives the same completion, on every target;
    None draws a fresh seed per call. The n completions of a prompt use seed, seed + 1, ...
    stop strings end a completion before them; stop_token_ids end it at those tokens (besides
    the model's end-of-sequence ids, unless ignore_eos). logprobs = k (0..20) returns, per
    generated token, its log-probability and those of the k most likely tokens.
    The engine checks every value when the request is added (LightwaveError).
    """

    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: Union[str, List[str], None] = None
    stop_token_ids: List[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: Optional[int] = None

    def _requests(self, prompt: List[int]) -> List[_lightwave.Request]:
        """The engine requests of the n completions of `prompt`."""
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be at least 1, got {self.n}")
        seed = secrets.randbits(64) if self.seed is None else self.seed
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        out = []
        for i in range(self.n):
            r = _lightwave.Request()
            r.prompt = prompt
            r.max_tokens = self.max_tokens
            r.temperature = self.temperature
            r.top_p = self.top_p
            r.top_k = 0 if self.top_k == -1 else self.top_k
            r.min_p = self.min_p
            r.seed = (seed + i) % 2**64
            r.presence_penalty = self.presence_penalty
            r.frequency_penalty = self.frequency_penalty
            r.repetition_penalty = self.repetition_penalty
            r.stop_strings = stops
            r.stop_token_ids = list(self.stop_token_ids)
            r.ignore_eos = self.ignore_eos
            r.top_logprobs = self.logprobs or 0
            out.append(r)
        return out
