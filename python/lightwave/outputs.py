"""What generation returns: RequestOutput (one prompt) holding CompletionOutputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from . import _lightwave


@dataclass
class CompletionOutput:
    """One completion of a prompt, or, from a stream, what one step added to it.

    finish_reason: "stop" (an end-of-sequence or stop token, or a stop string), "length"
    (max_tokens or the context) or "abort" (cancelled); None while unfinished. logprobs (when
    SamplingParams.logprobs was set): per token, {token id: log-probability} for the chosen
    token and the most likely ones. cumulative_logprob: the sum over the chosen tokens.
    """

    index: int
    text: str
    token_ids: List[int]
    finish_reason: Optional[str] = None
    logprobs: Optional[List[Dict[int, float]]] = None
    cumulative_logprob: Optional[float] = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """The completions of one prompt. prompt is None for a prompt given as token ids."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool = True


def completion(index: int, out: _lightwave.Output, logprobs: Optional[int]) -> CompletionOutput:
    """A CompletionOutput from what the engine produced for one request."""
    per_token = None
    if logprobs is not None:
        per_token = []
        for i, (token, lp) in enumerate(zip(out.tokens, out.logprobs)):
            d = {token: lp}
            if i < len(out.top_logprobs):
                for t, l in out.top_logprobs[i]:
                    d.setdefault(t, l)
            per_token.append(d)
    return CompletionOutput(
        index=index,
        text=out.text,
        token_ids=list(out.tokens),
        finish_reason=out.finish_reason if out.finished else None,
        logprobs=per_token,
        cumulative_logprob=float(sum(out.logprobs)),
    )
