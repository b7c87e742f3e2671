"""A tuned MLP's call: the metadata of one (2, 16) tensor, then the backend dict's `in` and `[]`."""

import torch
from aitune_fast import SampleMetadata


def make():
    arguments = {"input": torch.randn(2, 16)}
    backends = {SampleMetadata.from_inputs(arguments, strict=True): "backend"}

    def call():
        md = SampleMetadata.from_inputs(arguments, strict=True)
        if md in backends:
            return backends[md]
        raise RuntimeError("no backend")

    return call
