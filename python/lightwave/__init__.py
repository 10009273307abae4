"""lightwave: LLM inference on NVIDIA and AMD GPUs, or on the CPU through a SIMT emulator.

    import lightwave
    llm = lightwave.LLM("SmolLM2-135M-Instruct.Q4_1.gguf")
    out = llm.generate(["The capital of France is"], lightwave.SamplingParams(temperature=0, max_tokens=8))
    print(out[0].outputs[0].text)

The engine is C++ (lightwave._lightwave); this package gives it a vLLM-like API. Errors of
the engine raise LightwaveError (a RuntimeError) with the engine's message.
"""

from ._lightwave import LightwaveError, Tokenizer, __version__, build_target, device_count
from .llm import LLM, CompletionStream
from .outputs import CompletionOutput, RequestOutput
from .params import SamplingParams

__all__ = [
    "LLM",
    "CompletionOutput",
    "CompletionStream",
    "LightwaveError",
    "RequestOutput",
    "SamplingParams",
    "Tokenizer",
    "__version__",
    "build_target",
    "device_count",
]
