"""The JSON Schema of ``SampleMetadata.to_json()`` (format ``aitune_fast.sample_metadata``, version 1)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SCHEMA_FILE = "sample_metadata.schema.json"


def sample_metadata_schema() -> dict[str, Any]:
    """The schema, as a dict (JSON Schema draft 2020-12)."""
    return json.loads(resources.files(__name__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


__all__ = ["SCHEMA_FILE", "sample_metadata_schema"]
