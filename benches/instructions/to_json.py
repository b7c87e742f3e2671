"""A benchmark workload's metadata written as JSON text (``WL``, default llm_decode): ``to_json()``."""

import os

from aitune_fast import SampleMetadata
from aitune_fast.bench.impls import load_fast_impl, register_user_types
from aitune_fast.bench.workloads import WORKLOADS


def make():
    register_user_types(load_fast_impl(False))
    md = SampleMetadata.from_inputs(WORKLOADS[os.environ.get("WL", "llm_decode")].make(), strict=True)
    return md.to_json
