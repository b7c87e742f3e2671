"""The benchmark workloads, as ``benches/README.md`` defines them.

Every builder takes the batch size (axis 0 of the batched tensors) so that ``make_batch`` can be
given a metadata object that has *learned* its batch axes: it is built from the workload at the base
batch size and updated with the same workload at twice that batch size.  The benchmarked instances
``a`` and ``b`` are always built at the base batch size, exactly as the README describes them.
Tensor contents never matter (``torch.empty``), except ``cache_position``, whose first element
decides the LLM phase (``tensor([5])``: a decode step).
"""

from __future__ import annotations

from collections import UserDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


class Layer:
    """One layer of a static KV cache: attributes ``keys`` and ``values``.

    A plain class (no dataclass), registered with ``Locator.register_user_type(Layer, only_tensors=True)``.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys = keys
        self.values = values


class Cache:
    """A static KV cache: attribute ``layers``, a list of :class:`Layer`.

    A plain class (no dataclass), registered with ``Locator.register_user_type(Cache, only_tensors=True)``.
    """

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers


USER_TYPES: tuple[type, ...] = (Cache, Layer)


class BatchEncoding(UserDict):
    """A tokenizer's output the way ``transformers.BatchEncoding`` is built (transformers is not a dependency).

    A ``UserDict`` subclass whose ``items``/``keys``/``values`` return the views of ``self.data``, whose
    ``__getitem__`` reads ``self.data`` for string keys and whose attributes fall back to the data keys.
    Not registered anywhere: both implementations walk it as a ``UserDict``.
    """

    def __init__(self, data: dict[str, Any] | None = None, encoding: Any = None) -> None:
        super().__init__(data)
        self._encodings = encoding

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            return self.data[item]
        if self._encodings is not None:
            return self._encodings[item]
        raise KeyError(item)

    def __getattr__(self, item: str) -> Any:
        try:
            return self.data[item]
        except KeyError:
            raise AttributeError(item) from None

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data, "encodings": self._encodings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.data = state["data"]
        self._encodings = state["encodings"]

    def keys(self) -> Any:
        return self.data.keys()

    def values(self) -> Any:
        return self.data.values()

    def items(self) -> Any:
        return self.data.items()


def vision(batch: int = 8) -> dict[str, Any]:
    """An image classifier call: one (8, 3, 224, 224) float32 tensor."""
    return {"x": torch.empty(batch, 3, 224, 224, dtype=torch.float32)}


def diffusion(batch: int = 2) -> dict[str, Any]:
    """A UNet step (SDXL-like forward kwargs): 5 tensors and some constants."""
    return {
        "sample": torch.empty(batch, 4, 64, 64),
        "timestep": torch.empty((), dtype=torch.int64),
        "encoder_hidden_states": torch.empty(batch, 77, 2048),
        "timestep_cond": None,
        "attention_mask": None,
        "cross_attention_kwargs": None,
        "added_cond_kwargs": {"text_embeds": torch.empty(batch, 1280), "time_ids": torch.empty(batch, 6)},
        "return_dict": False,
    }


def batch_encoding(batch: int = 8, seq: int = 128) -> dict[str, Any]:
    """A text model's call on a tokenizer's output: a ``BatchEncoding`` of three (8, 128) int64 tensors
    (``input_ids``, ``attention_mask``, ``token_type_ids``) plus two flags."""
    return {
        "inputs": BatchEncoding(
            {
                "input_ids": torch.empty(batch, seq, dtype=torch.int64),
                "attention_mask": torch.empty(batch, seq, dtype=torch.int64),
                "token_type_ids": torch.empty(batch, seq, dtype=torch.int64),
            }
        ),
        "output_hidden_states": False,
        "return_dict": True,
    }


def llm_decode(batch: int = 1, num_layers: int = 32) -> dict[str, Any]:
    """One decode step of a 32-layer model with a static KV cache: 68 tensors."""
    cache = Cache([Layer(torch.empty(batch, 8, 1024, 64), torch.empty(batch, 8, 1024, 64)) for _ in range(num_layers)])
    return {
        "input_ids": torch.empty(batch, 1, dtype=torch.int64),
        "attention_mask": torch.empty(batch, 1024, dtype=torch.int64),
        "position_ids": torch.empty(batch, 1, dtype=torch.int64),
        "past_key_values": cache,
        "inputs_embeds": None,
        "use_cache": True,
        "output_attentions": False,
        "output_hidden_states": False,
        "cache_position": torch.tensor([5]),
        "logits_to_keep": 0,
    }


def large_graph(batch: int = 2, num_blocks: int = 100) -> dict[str, Any]:
    """``num_blocks`` blocks of 100 tensors of shape (batch, j % 5 + 1), a float and 50 names."""
    return {
        "blocks": {f"b{i}": [torch.empty(batch, j % 5 + 1) for j in range(100)] for i in range(num_blocks)},
        "scale": 0.5,
        "names": [f"n{i}" for i in range(50)],
    }


def large_graph_10k(batch: int = 2) -> dict[str, Any]:
    """A big pipeline's metadata: 100 blocks of 100 tensors (10,000 tensors)."""
    return large_graph(batch, 100)


def scale_1m(batch: int = 2) -> dict[str, Any]:
    """Metadata at scale: ``large_graph_10k`` with 10,000 blocks (1,000,000 tensors)."""
    return large_graph(batch, 10_000)


@dataclass(frozen=True)
class Workload:
    """A named workload: its builder, its base batch size and its tensor count."""

    name: str
    build: Callable[[int], dict[str, Any]]
    batch: int
    tensors: int
    description: str

    def make(self, batch: int | None = None) -> dict[str, Any]:
        """Build one instance at ``batch`` (default: the base batch size)."""
        return self.build(self.batch if batch is None else batch)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("vision", vision, 8, 1, "image classifier call"),
        Workload("diffusion", diffusion, 2, 5, "UNet step"),
        Workload("batch_encoding", batch_encoding, 8, 3, "text model call on a UserDict tokenizer output"),
        Workload("llm_decode", llm_decode, 1, 68, "decode step, 32-layer static KV cache"),
        Workload("large_graph_10k", large_graph_10k, 2, 10_000, "a big pipeline's metadata"),
        Workload("scale_1m", scale_1m, 2, 1_000_000, "metadata at scale"),
    )
}


def flatten_tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in ``obj`` in traversal order (for the floor baseline; not timed)."""
    out: list[torch.Tensor] = []

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (dict, UserDict)):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, USER_TYPES):
            for v in vars(x).values():
                walk(v)

    walk(obj)
    return out
