"""A benchmark workload's dispatch (``WL``, default llm_decode): the call's metadata looked up in a dict keyed
by the metadata of an equal call built from other objects."""

import os

from aitune_fast import SampleMetadata
from aitune_fast.bench.impls import load_fast_impl, register_user_types
from aitune_fast.bench.workloads import WORKLOADS


def make():
    register_user_types(load_fast_impl(False))
    workload = WORKLOADS[os.environ.get("WL", "llm_decode")]
    key_args, call_args = workload.make(), workload.make()
    backends = {SampleMetadata.from_inputs(key_args, strict=True): "backend"}

    def call():
        return backends[SampleMetadata.from_inputs(call_args, strict=True)]

    return call
