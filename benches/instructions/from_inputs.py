"""A benchmark workload's walk alone (``WL``, default llm_decode): ``from_inputs(.., strict=True)``."""

import os

from aitune_fast import SampleMetadata
from aitune_fast.bench.impls import load_fast_impl, register_user_types
from aitune_fast.bench.workloads import WORKLOADS


def make():
    register_user_types(load_fast_impl(False))
    args = WORKLOADS[os.environ.get("WL", "llm_decode")].make()

    def call():
        return SampleMetadata.from_inputs(args, strict=True)

    return call
