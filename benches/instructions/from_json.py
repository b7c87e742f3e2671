"""A benchmark workload's metadata read back from JSON text (``WL``, default llm_decode): ``from_json()``."""

import os

from aitune_fast import SampleMetadata
from aitune_fast.bench.impls import load_fast_impl, register_user_types
from aitune_fast.bench.workloads import WORKLOADS


def make():
    register_user_types(load_fast_impl(False))
    text = SampleMetadata.from_inputs(WORKLOADS[os.environ.get("WL", "llm_decode")].make(), strict=True).to_json()

    def call():
        return SampleMetadata.from_json(text)

    return call
