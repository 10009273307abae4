"""Type stubs of lightwave._lightwave, the C++ engine (src/python/bindings.cpp)."""

from typing import Dict, List, Literal, Optional, Sequence, Tuple, overload

__version__: str
build_target: str  # "cuda", "hip" or "host"

class LightwaveError(RuntimeError):
    """An error of the engine, with its C++ message."""

def device_count() -> int: ...

class Request:
    """One completion to generate (the engine's request)."""

    prompt: List[int]
    max_tokens: int
    stop_token_ids: List[int]
    stop_strings: List[str]
    ignore_eos: bool
    top_logprobs: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    seed: int
    def __init__(self) -> None: ...

class Output:
    """What a request produced since its output was last collected."""

    @property
    def id(self) -> int: ...
    @property
    def tokens(self) -> List[int]: ...
    @property
    def logprobs(self) -> List[float]: ...
    @property
    def top_logprobs(self) -> List[List[Tuple[int, float]]]: ...
    @property
    def text(self) -> str: ...
    @property
    def finished(self) -> bool: ...
    @property
    def finish_reason(self) -> str: ...

class Engine:
    """A model served by one continuous-batching engine."""

    def __init__(
        self,
        model: str,
        dtype: str = "bf16",
        tensor_parallel_size: int = 1,
        device: int = 0,
        max_num_seqs: int = 256,
        kv_cache_fraction: float = 0.9,
        max_num_batched_tokens: int = 2048,
        block_size: int = 16,
        num_kv_blocks: int = 0,
        enable_prefix_caching: bool = True,
        deterministic: bool = False,
        kv_cache_dtype: str = "auto",
    ) -> None: ...
    def add(self, request: Request) -> int: ...
    def next(self, id: int) -> Output: ...
    def run(self, ids: Sequence[int]) -> List[Output]: ...
    def cancel(self, id: int) -> None: ...
    def stats(self) -> Dict[str, int]: ...
    def tokenizer(self) -> Tokenizer: ...
    @property
    def num_kv_blocks(self) -> int: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...

class Tokenizer:
    """A model's tokenizer and chat template (LLM.get_tokenizer())."""

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]: ...
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...
    @overload
    def apply_chat_template(
        self,
        messages: Sequence[Dict[str, str]],
        add_generation_prompt: bool = True,
        tokenize: Literal[False] = False,
        allow_special_in_content: bool = False,
    ) -> str: ...
    @overload
    def apply_chat_template(
        self,
        messages: Sequence[Dict[str, str]],
        add_generation_prompt: bool = True,
        *,
        tokenize: Literal[True],
        allow_special_in_content: bool = False,
    ) -> List[int]: ...
    def id_to_token(self, id: int) -> str: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def bos_token_id(self) -> Optional[int]: ...
    @property
    def eos_token_id(self) -> Optional[int]: ...
    @property
    def stop_token_ids(self) -> List[int]: ...
    @property
    def has_chat_template(self) -> bool: ...
