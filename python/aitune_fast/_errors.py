"""The exception ``from_json`` raises for text it cannot read."""

import json


class MetadataDecodeError(json.JSONDecodeError):
    """``SampleMetadata.from_json`` could not read its text: not JSON, or JSON that is not ``to_json()`` output.

    A ``json.JSONDecodeError`` (so a ``ValueError``), as the ``json`` module and orjson raise: ``msg`` says what
    was wrong, ``doc`` is the text read (bytes are decoded as UTF-8), ``pos`` the character offset in ``doc`` where
    it was found, ``lineno`` and ``colno`` its line and column (from 1).
    """
