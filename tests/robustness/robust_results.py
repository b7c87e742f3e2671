"""What the scenarios of ``robust_cases.py`` return: records read by field name, ``Outcome`` lists inside them.

A scenario runs in a child process; ``child.run_scenario`` sends its result through JSON and rebuilds these types
from the scenario's signature in the parent.
"""

from __future__ import annotations

import dataclasses

Outcome = list
"""One call as ``impls.outcome`` reports it: ``["ok", value or type name]`` or ``["raise", exception type name,
message head]``."""


@dataclasses.dataclass(frozen=True)
class CycleCall:
    """One entry point given one cyclic argument, twice."""

    first: Outcome  #: the first call
    again: Outcome  #: a second call with the same argument
    path: str  #: the path where the cycle closes, which the error message must name
    seconds: float  #: both calls together


@dataclasses.dataclass(frozen=True)
class Cycles:
    cases: dict[str, CycleCall]  #: by ``"{case}/{entry point}"``
    usable_after: bool  #: a plain metadata still describes a tensor afterwards
    hwm_growth_mib: float  #: growth of the peak RSS over all cases


@dataclasses.dataclass(frozen=True)
class EndlessRun:
    outcome: Outcome  #: from_inputs of the endless argument (the message cut to 200 characters)
    seconds: float  #: how long that took
    hwm_growth_mib: float  #: growth of the peak RSS meanwhile
    max_depth: int | None  #: ``aitune_fast._core.MAX_DEPTH`` (None if missing)


@dataclasses.dataclass(frozen=True)
class NestedLayouts:
    same: list[bool]  #: per round: the same leaves, paths and values as the reference
    n: int  #: how many leaves the last round found


@dataclasses.dataclass(frozen=True)
class SharedReferences:
    """One strictness of ``shared_references``."""

    snap_same: bool  #: the same description as the reference
    classes: bool | str  #: True, or why the ==/hash classes differ from the reference's
    n_tensors: list[int]  #: tensors described by the reference, then by aitune_fast


@dataclasses.dataclass(frozen=True)
class DeepOps:
    """Every operation on one 100,000-deep argument (``a``) and a second one of other shapes (``b``)."""

    n_tensors: int  #: tensors described in ``a``
    depth: int  #: the depth of ``a``'s tensor's locator
    eq: Outcome  #: ``a == b``
    hash_eq: Outcome  #: ``hash(a) == hash(b)``
    json: Outcome  #: the length of the tensor's access path in ``to_json_dict()``
    str: Outcome  #: the length of ``str(a)``
    update: Outcome  #: ``a.update_shapes_seen(b)``
    learned: list  #: the tensor's shape learned by that update
    exact: Outcome  #: two ExactSampleMetadata of ``a`` compare equal
    outputs: Outcome  #: tensors described by from_outputs of the nested value
    leaves: int  #: leaves ``find_leaves`` yields
    get_value: Outcome  #: the first leaf's locator reads that leaf
    set_value: Outcome  #: and writes a new one that reads back
    to_json: Outcome  #: the length of ``to_json()``


@dataclasses.dataclass(frozen=True)
class TooDeep:
    limit: int | None  #: ``aitune_fast._core.MAX_DEPTH``; None (and nothing else) if missing
    outcome: Outcome | None = None  #: from_inputs one level beyond the limit (the message cut to 120 characters)
    seconds: float | None = None  #: how long that took


class ByName:
    """For records of outcomes that a test checks alike, whatever the operation."""

    def by_name(self) -> dict[str, Outcome]:
        """The outcomes by operation (field) name."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class Renderings(ByName):
    """The operations that hash, compare and render one deeply nested other value."""

    hash: Outcome
    eq: Outcome
    json: Outcome
    str: Outcome


@dataclasses.dataclass(frozen=True)
class Codecs(ByName):
    """The codecs on one deeply nested document, on a small thread stack."""

    from_json: Outcome
    to_json: Outcome
    to_dict: Outcome
    from_dict: Outcome
    round_trip: Outcome  #: ``from_json(to_json())`` equals the metadata
    hash: Outcome


@dataclasses.dataclass(frozen=True)
class SharedSublists:
    input_bytes: int  #: the size of the pickled other value
    to_dict: Outcome  #: the length of ``to_dict()``
    to_dict_seconds: float
    to_json: Outcome  #: the length of ``to_json()``
    to_json_seconds: float
    round_trip: bool | None = None  #: ``from_json(to_json())`` equals the metadata; None if to_json raised


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One check run on both implementations."""

    same: bool  #: equal results (or the same exception type and message head)
    ref: str | None = None  #: the reference's ``"ok"`` or ``"raise"`` (None for the across-kinds check)
    fast: str | None = None  #: aitune_fast's, where they differ
    diff: str | None = None  #: the first difference, where they differ


@dataclasses.dataclass(frozen=True)
class GetterError:
    """One raising getter through one entry point: ``["ok"]`` or ``["raise", type name, the very same object]``."""

    ref: list
    fast: list


@dataclasses.dataclass(frozen=True)
class Battery:
    tensor_kinds: dict[str, dict[str, Comparison]]  #: by kind, then check
    other_data: dict[str, Comparison]  #: by case
    getter_errors: dict[str, GetterError]  #: by ``"{error}/{case}/{entry point}"``


@dataclasses.dataclass(frozen=True)
class SmallStackCorpus:
    battery: Battery
    cycles: Cycles
    deep_other_data: dict[str, Renderings]  #: by kind of value
    shared: dict[str, SharedReferences]  #: by strictness
    hostile: dict[str, int]  #: ``hostile_cases.fuzz``'s counts


@dataclasses.dataclass(frozen=True)
class Panic:
    """One operation that has made the core panic."""

    outcome: list  #: ``["ok"]`` or ``["raise", type name, is an Exception, message head]``
    usable_after: bool  #: a plain metadata still works afterwards


@dataclasses.dataclass(frozen=True)
class Threads:
    errors: list[str]  #: the first 20 results that differed from the single-threaded ones, or tracebacks
    churns: int  #: rounds of registry changes the churn thread made meanwhile
    seconds: float


@dataclasses.dataclass(frozen=True)
class ConcurrentUse:
    """One metadata read by one thread while another uses it."""

    reader: Outcome
    writer: Outcome
    after: Outcome  #: hash and to_json_dict afterwards


@dataclasses.dataclass(frozen=True)
class PeakRss:
    before: float  #: peak RSS (MiB) after the warm-up
    after: float  #: and after the measured cycles
    seconds: float  #: the measured cycles
