"""Child program of ``test_patch_switch.py``: switching the patch while AITune works in other threads.

Run as ``python switch_child.py MODE WORKDIR [ARGS...]``; prints one JSON document on its last stdout line.
Modes:
  in_flight START HOLD LIMIT  a recording call (the module's first) is held inside its forward while another thread
                   switches the patch (START: "stock" patches, "patched" unpatches); HOLD seconds later the forward
                   returns; LIMIT is the switch's wait for calls in flight (seconds)
  tune             a switch while another thread runs ``Module.tune()`` (held between its two graphs)
  load             a switch while another thread loads a checkpoint: through ``ait.load`` and ``TunedModule.from_dict``
  equality         AITune's own locators, specs and metadata made before the patch, compared under it
  interrupts SEED N  a KeyboardInterrupt at N seeded points of each switch (some twice: in its roll back too)
  random SEED N    switches at seeded random moments while threads record, tune and load, until N went through
                   and N were refused
  reentry SEED N   AITune called on the switching thread at N seeded points of each switch (as a signal handler, a
                   finalizer or a weakref callback would): each call runs whole in one world or is refused
  jit              a switch while another thread runs AITune's JIT tuning (``PatchedModule.tune``, held inside its
                   strategy's tune)
  fork AT          the process forks while another thread is inside ``patch_aitune()`` (AT: "waiting" for a
                   recording call in flight, or "converting" live objects); the child calls AITune and switches
  hooks SEED N     three threads call one tuned module with a forward hook and a pre-hook, one call at a time,
                   while the main thread makes N seeded switches (call path on, call path off, unpatch, patch):
                   after each, the hooks are all in place and fire
  hook_race WORLD  two calls of one tuned module overlap inside AITune's ``Module._forward`` (the second enters it
                   while the first is held in its forward), in WORLD "stock" (aitune_fast blocked), "off"
                   (patched, stock's call path) or "on" (aitune_fast's call path): which hooks are left after
  handoff START LIMIT  a tuned module's forward hands the call of another tuned module to a worker thread and waits
                   for it, while the main thread switches (START: "stock" patches, "patched" unpatches; LIMIT: the
                   switch's wait for calls in flight, seconds)
Needs tests/fixtures/tensorrt_stub on PYTHONPATH (AITune imports ``tensorrt``; the stand-in is not TensorRT).
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

from child_kit import quick_strategy, report

warnings.filterwarnings("ignore")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

OURS = "aitune_fast"
STOCK = "aitune.torch.module"


def setup():
    import aitune.torch as ait
    import aitune_fast
    import torch
    from aitune_fast.patch import _quiescence

    return ait, torch, aitune_fast, _quiescence


class Gate:
    """Holds a forward (or a tune step, a load) until released."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        if self.armed:
            self.armed = False
            self.entered.set()
            self.release.wait(30)


def held_mlp(torch, gate: Gate):
    class Held(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(16, 4)

        def forward(self, x):
            gate.hold()
            return self.lin(x)

    return Held().eval()


def world_of(value) -> str:
    module = type(value).__module__
    return "ours" if module.startswith(OURS) else "stock" if module.startswith(STOCK) else module


def key_worlds(m) -> list[str]:
    """The class (ours/stock) of every metadata key and graph spec a module's wrapper holds."""
    wrapper = m.module
    found = []
    for name in ("_backends", "_graph_specs", "_samples"):
        found += [world_of(k) for k in getattr(wrapper, name, {})]
    for spec in getattr(wrapper, "_graph_specs", {}).values():
        found.append(world_of(spec.input_spec))
    return sorted(set(found))


def name_worlds() -> list[str]:
    """Whether AITune's modules hold ours or AITune's classes under the swapped names."""
    names = ("SampleMetadata", "ExactSampleMetadata", "TensorSpec", "Locator")
    found = set()
    for name, module in list(sys.modules.items()):
        if name.startswith("aitune.") and module is not None:
            for attribute in names:
                value = vars(module).get(attribute)
                if isinstance(value, type):
                    found.add("ours" if value.__module__.startswith(OURS) else "stock")
    return sorted(found)


def switch(aitune_fast, to_patched: bool) -> str | None:
    """Switch; the refusal's message when refused."""
    try:
        aitune_fast.patch_aitune() if to_patched else aitune_fast.unpatch_aitune()
    except aitune_fast.patch.SwitchRefused as exc:
        return str(exc)
    return None


def in_thread(fn, *args):
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            box["error"] = f"{type(exc).__name__}: {exc}"[:300]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def in_flight_mode(workdir, start, hold, limit):
    ait, torch, aitune_fast, quiescence = setup()
    quiescence.CALLS_IN_FLIGHT_LIMIT_S = float(limit)
    if start == "patched":
        aitune_fast.patch_aitune()
    gate = Gate()
    m = ait.Module(held_mlp(torch, gate), "held", strategy=quick_strategy(ait))
    x = torch.randn(2, 16)
    gate.armed = True
    with torch.no_grad():
        call, call_box = in_thread(m, x)
        gate.entered.wait(30)
        switcher, switch_box = in_thread(switch, aitune_fast, start == "stock")
        time.sleep(float(hold))
        gate.release.set()
        call.join(60)
        switcher.join(60)
        graphs_after_first = len(m.graph_specs)
        m(x)  # a second call of the same shape: the same graph
        out = {
            "call_error": call_box.get("error"),
            "switch_error": switch_box.get("error"),
            "refused": switch_box.get("value"),
            "patched": aitune_fast.is_aitune_patched(),
            "graphs_after_first": graphs_after_first,
            "graphs": len(m.graph_specs),
            "keys": key_worlds(m),
            "names": name_worlds(),
        }
        m.tune(device="cpu")
        out["backends"] = len(m.module.backends)
        out["out_ok"] = bool(torch.equal(m(x), m.__wrapped__.lin(x)))
    path = os.path.join(workdir, "held.pt")
    ait.save(m, path)
    fresh = ait.Module(held_mlp(torch, Gate()), "held", strategy=quick_strategy(ait))
    ait.load(fresh, path)
    with torch.no_grad():
        out["loaded_ok"] = bool(torch.equal(fresh(x), m.__wrapped__.lin(x)))
    aitune_fast.unpatch_aitune()
    with torch.no_grad():
        out["unpatched_ok"] = bool(torch.equal(m(x), m.__wrapped__.lin(x)))
    return out


def two_graph_module(ait, torch):
    """A recorded (untuned) MLP module with two graphs: inputs of rank 2 and rank 3."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 4)).eval()
    m = ait.Module(model, f"two-{random.random()}", strategy=quick_strategy(ait))
    xs = (torch.randn(2, 16), torch.randn(2, 3, 16))
    with torch.no_grad():
        for x in xs:
            m(x)
    return m, model, xs


def calls_ok(torch, m, model, xs) -> list[str]:
    errors = []
    with torch.no_grad():
        for x in xs:
            try:
                if not torch.equal(m(x), model(x)):
                    errors.append(f"wrong output for {tuple(x.shape)}")
            except Exception as exc:  # noqa: BLE001 - reported
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
    return errors


def tune_mode(workdir):
    ait, torch, aitune_fast, quiescence = setup()
    m, model, xs = two_graph_module(ait, torch)
    gate = Gate()
    strategy = m._self_strategies if hasattr(m, "_self_strategies") else None
    from aitune.torch.tune_strategy import OneBackendStrategy

    stock_tune = OneBackendStrategy.tune
    seen = []

    def held_tune(self, *args, **kwargs):
        seen.append(1)
        if len(seen) == 2:  # between the two graphs: the first is tuned, its key in tune()'s own dict
            gate.armed = True
            gate.hold()
        return stock_tune(self, *args, **kwargs)

    OneBackendStrategy.tune = held_tune
    tuner, tune_box = in_thread(m.tune, "cpu")
    gate.entered.wait(30)
    refused = switch(aitune_fast, True)
    gate.release.set()
    tuner.join(120)
    OneBackendStrategy.tune = stock_tune
    out = {
        "strategy": strategy is not None,
        "tune_error": tune_box.get("error"),
        "refused": refused,
        "patched_during": aitune_fast.is_aitune_patched(),
        "backends": len(m.module.backends),
        "keys_after_tune": key_worlds(m),
        "errors_after_tune": calls_ok(torch, m, model, xs),
    }
    out["refused_after"] = switch(aitune_fast, True)
    out["keys_patched"] = key_worlds(m)
    out["errors_patched"] = calls_ok(torch, m, model, xs)
    out["refused_unpatch"] = switch(aitune_fast, False)
    out["keys_unpatched"] = key_worlds(m)
    out["errors_unpatched"] = calls_ok(torch, m, model, xs)
    return out


def load_mode(workdir):
    ait, torch, aitune_fast, quiescence = setup()
    from aitune.torch.backend import TorchEagerBackend
    from aitune.torch.module.tuned_module import TunedModule

    m, model, xs = two_graph_module(ait, torch)
    m.tune(device="cpu")
    path = os.path.join(workdir, "two.pt")
    ait.save(m, path)
    state = m.module.to_dict()
    gate = Gate()
    stock_from_dict = TorchEagerBackend.__dict__["from_dict"]

    def held_from_dict(*args, **kwargs):
        gate.hold()
        return stock_from_dict.__get__(None, TorchEagerBackend)(*args, **kwargs)

    TorchEagerBackend.from_dict = staticmethod(held_from_dict)
    out = {}
    # ait.load (checkpoint files): refused while it runs
    fresh = ait.Module(torch.nn.Sequential(torch.nn.Linear(16, 4)).eval(), m.name, strategy=quick_strategy(ait))
    fresh.__wrapped__.load_state_dict(model.state_dict())
    gate.armed = True
    loader, load_box = in_thread(ait.load, fresh, path)
    gate.entered.wait(30)
    out["ait_load_refused"] = switch(aitune_fast, True)
    gate.release.set()
    loader.join(60)
    out["ait_load_error"] = load_box.get("error")
    out["ait_load_errors"] = calls_ok(torch, fresh, model, xs)
    # TunedModule.from_dict (a key dict in flight): the switch waits for it, then converts what it built
    gate.__init__()
    gate.armed = True
    loader, load_box = in_thread(TunedModule.from_dict, model, state)
    gate.entered.wait(30)
    switcher, switch_box = in_thread(switch, aitune_fast, True)
    time.sleep(0.3)
    gate.release.set()
    loader.join(60)
    switcher.join(60)
    tuned = load_box.get("value")
    out["from_dict_error"] = load_box.get("error")
    out["from_dict_refused"] = switch_box.get("value")
    out["patched"] = aitune_fast.is_aitune_patched()
    out["from_dict_keys"] = sorted({world_of(k) for k in getattr(tuned, "_backends", {})})
    TorchEagerBackend.from_dict = stock_from_dict
    return out


def equality_mode(workdir):
    ait, torch, aitune_fast, quiescence = setup()
    from aitune.torch.module.exact_sample_metadata import ExactSampleMetadata
    from aitune.torch.module.locator import Locator, ObjectType
    from aitune.torch.module.sample_metadata import SampleMetadata
    from aitune.torch.module.tensor_spec import TensorSpec

    def build():
        inputs = {"x": torch.ones(2, 3), "kw": {"a": [torch.zeros(4), 3]}}
        loc = Locator((("x", ObjectType.DICT),))
        spec = TensorSpec([2, 3], [2, 3], [2, 3], torch.float32, [0, 0])
        return {
            "locator": loc,
            "spec": spec,
            "md": SampleMetadata.from_inputs(inputs),
            "exact": ExactSampleMetadata.from_inputs(inputs),
        }

    a, b = build(), build()
    keyed = {name: {value: name} for name, value in a.items()}

    def facts():
        return {
            name: {
                "eq": a[name] == b[name],
                "ne": a[name] != b[name],
                "hash": hash(a[name]) == hash(b[name]),
                "found": keyed[name].get(b[name]) == name,
            }
            for name in a
        }

    out = {"stock": facts()}
    aitune_fast.patch_aitune()
    out["patched"] = facts()
    aitune_fast.unpatch_aitune()
    out["unpatched"] = facts()
    return out


# ---------------------------------------------------------------------------------------------- interrupts

UNTRACED = {"conversion_plan", "_swap_live_forwards"}  # scans of every live object: planning only, or one
# attribute store per object that the switch redoes whole


class Injector:
    """A tracer that raises KeyboardInterrupt at given line events of the switch's own code (on this thread)."""

    def __init__(self, at: set[int]) -> None:
        import aitune_fast.patch

        self.traced = os.path.dirname(aitune_fast.patch.__file__) + os.sep  # the integration's own code
        self.at = at
        self.count = 0
        self.sites: list[tuple[str, int]] = []

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if code.co_name in UNTRACED or not code.co_filename.startswith(self.traced):
            return None
        return self.local

    def local(self, frame, event, arg):
        if event == "line":
            self.count += 1
            self.sites.append((os.path.basename(frame.f_code.co_filename), frame.f_lineno))
            if self.count in self.at:
                raise KeyboardInterrupt(f"injected at {self.sites[-1]}")
        return self.local


def traced(fn, at: set[int]) -> tuple[Injector, bool]:
    injector = Injector(at)
    sys.settrace(injector)
    interrupted = False
    try:
        fn()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.settrace(None)
    return injector, interrupted


def interrupts_mode(workdir, seed, n):
    ait, torch, aitune_fast, quiescence = setup()
    rng = random.Random(int(seed))
    tuned, model, xs = two_graph_module(ait, torch)
    tuned.tune(device="cpu")
    recording, rec_model, rec_xs = two_graph_module(ait, torch)
    modules = ((tuned, model, xs), (recording, rec_model, rec_xs))

    def world() -> str:
        found = set(name_worlds())
        for m, _, _ in modules:
            found.update(key_worlds(m))
        return found.pop() if len(found) == 1 else "mixed"

    problems: list[str] = []
    counts = {"interrupted": 0, "twice": 0, "runs": 0}
    conversion = interrupted_conversion(aitune_fast, world)
    for to_patched in (True, False):
        start = "stock" if to_patched else "ours"
        target = "ours" if to_patched else "stock"

        def do(to_patched=to_patched):
            aitune_fast.patch_aitune() if to_patched else aitune_fast.unpatch_aitune()

        def back(to_patched=to_patched):
            aitune_fast.unpatch_aitune() if to_patched else aitune_fast.patch_aitune()

        probe, _ = traced(do, set())
        back()
        events = probe.count
        firsts: dict[tuple[str, int], int] = {}
        for index, site in enumerate(probe.sites, 1):
            firsts.setdefault(site, index)
        points = sorted(rng.sample(sorted(firsts.values()), min(int(n), len(firsts))))
        for point in points:
            twice = rng.random() < 0.3
            at = {point, point + rng.randint(1, 40)} if twice else {point}
            injector, interrupted = traced(do, at)
            counts["runs"] += 1
            counts["interrupted"] += interrupted
            counts["twice"] += twice and interrupted
            seen = world()
            site = injector.sites[point - 1] if point <= len(injector.sites) else None
            claims = aitune_fast.is_aitune_patched()
            if seen == "mixed" and not claims:
                problems.append(f"{site}: AITune holds some of aitune_fast's objects but is_aitune_patched() is False")
            if seen != "mixed" and claims != (seen == "ours"):
                problems.append(f"{site}: world {seen} but is_aitune_patched() is {claims}")
            if interrupted and not twice and seen != start and injector.count <= events:
                problems.append(f"{site}: an interrupted switch left the world {seen} (it was {start})")
            do()  # the second call finishes (or undoes) and switches
            if world() != target or aitune_fast.is_aitune_patched() != to_patched:
                problems.append(f"{site}: after the second call: world {world()}, patched {claims}")
            if quiescence.JOURNAL.edits or quiescence.GATES.standing:
                problems.append(f"{site}: journal or gates left after the second call")
            for m, mdl, x in modules[:1]:
                problems += [f"{site}: {e}" for e in calls_ok(torch, m, mdl, x)]
            if len(recording.graph_specs) != 2:
                problems.append(f"{site}: the recording module has {len(recording.graph_specs)} graphs")
            back()
    return {"problems": problems[:20], "n_problems": len(problems), "conversion": conversion, **counts}


class Everything:
    def __contains__(self, item) -> bool:
        return True


class Reentry(Injector):
    """A tracer that, at given line events of the switch's own code, calls `handler()` on the switching thread."""

    def __init__(self, at: set[int], handler) -> None:
        super().__init__(at)
        self.handler = handler

    def local(self, frame, event, arg):
        if event == "line":
            self.count += 1
            self.sites.append((os.path.basename(frame.f_code.co_filename), frame.f_lineno))
            if self.count in self.at:
                self.handler(self.sites[-1])
        return self.local


def reentry_mode(workdir, seed, n):
    ait, torch, aitune_fast, quiescence = setup()
    rng = random.Random(int(seed))
    tuned, model, xs = two_graph_module(ait, torch)
    tuned.tune(device="cpu")
    outcomes: dict[str, int] = {}
    problems: list[str] = []

    def handler_for(recording, rec_model, rec_xs):
        def handler(site):
            for m, mdl, inputs in ((tuned, model, xs), (recording, rec_model, rec_xs)):
                for x in inputs:
                    try:
                        with torch.no_grad():
                            outcome = "ran" if torch.equal(m(x), mdl(x)) else "wrong output"
                    except RuntimeError as exc:
                        refused = "while this thread switches the patch" in str(exc)
                        outcome = "refused" if refused else f"{type(exc).__name__}: {exc}"[:200]
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
                    if outcome not in ("ran", "refused"):
                        problems.append(f"{site}: {outcome}")

        return handler

    for to_patched in (True, False):
        target = "ours" if to_patched else "stock"

        def do(to_patched=to_patched):
            aitune_fast.patch_aitune() if to_patched else aitune_fast.unpatch_aitune()

        def back(to_patched=to_patched):
            aitune_fast.unpatch_aitune() if to_patched else aitune_fast.patch_aitune()

        if not to_patched:
            aitune_fast.patch_aitune()  # the switch probed is a real one
        standing: list[bool] = []  # per line event of the switch: whether its gates stood
        probe = Reentry(Everything(), lambda site, seen=standing: seen.append(bool(quiescence.GATES.standing)))
        sys.settrace(probe)
        try:
            do()
        finally:
            sys.settrace(None)
        back()
        firsts: dict[tuple[str, int], int] = {}
        for index, site in enumerate(probe.sites, 1):
            firsts.setdefault(site, index)
        inside = sorted(i for i in firsts.values() if standing[i - 1])  # mostly where a call could go half-switched
        outside = sorted(i for i in firsts.values() if not standing[i - 1])
        points = rng.sample(inside, min(int(n), len(inside))) + rng.sample(outside, min(int(n) // 4, len(outside)))
        for point in sorted(points):
            recording, rec_model, rec_xs = two_graph_module(ait, torch)
            injector = Reentry({point}, handler_for(recording, rec_model, rec_xs))
            sys.settrace(injector)
            try:
                do()
            finally:
                sys.settrace(None)
            site = injector.sites[point - 1] if point <= len(injector.sites) else None
            keys = key_worlds(recording)
            if keys not in ([], [target]) or name_worlds() != [target]:
                problems.append(f"{site}: after the switch to {target}: keys {keys}, names {name_worlds()}")
            problems += [f"{site} (after): {e}" for e in calls_ok(torch, tuned, model, xs)]
            back()
    return {"problems": problems[:20], "n_problems": len(problems), "outcomes": outcomes}


def interrupted_conversion(aitune_fast, world) -> dict:
    """A KeyboardInterrupt while ``unpatch_aitune()`` converts AITune's metadata back: what is claimed and held
    then, and after a second ``unpatch_aitune()``."""
    from aitune_fast.patch import _convert

    aitune_fast.patch_aitune()
    convert = _convert.reference_of

    def interrupted(md):
        raise KeyboardInterrupt("while converting")

    _convert.reference_of = interrupted
    try:
        aitune_fast.unpatch_aitune()
    except KeyboardInterrupt:
        pass
    finally:
        _convert.reference_of = convert
    out = {"claims": aitune_fast.is_aitune_patched(), "world": world()}
    aitune_fast.unpatch_aitune()
    out["second"] = {"claims": aitune_fast.is_aitune_patched(), "world": world()}
    return out


# ---------------------------------------------------------------------------------------------- random


RANDOM_LIMIT_S = 240.0  # the longest the random mode switches
RANDOM_IDLE_S = 0.4  # the tune-and-load thread's pause after each


def random_mode(workdir, seed, n):
    ait, torch, aitune_fast, quiescence = setup()
    rng = random.Random(int(seed))
    stop = threading.Event()
    errors: list[str] = []
    recorded: dict[int, set] = {}
    stats = {"records": 0, "tunes": 0, "loads": 0}
    torch.manual_seed(0)
    saved, saved_model, saved_xs = two_graph_module(ait, torch)
    saved.tune(device="cpu")
    path = os.path.join(workdir, "random.pt")
    ait.save(saved, path)

    def guarded(fn, pause=0.0):
        def run(i):
            while not stop.is_set():
                try:
                    fn(i)
                except Exception as exc:  # noqa: BLE001 - counted as a failed call
                    errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}"[:300])
                stop.wait(pause)

        return run

    modules: dict = {}  # by the recording thread's index: either thread may make its module first

    @guarded
    def record(i):
        # a module recording calls of growing shapes: every distinct rank is one graph
        if i not in modules:
            torch.manual_seed(i)
            modules[i] = ait.Module(torch.nn.Linear(16, 4).eval(), f"rec-{i}", strategy=quick_strategy(ait))
            recorded[i] = set()
        rank = 2 + len(recorded[i]) % 3
        shape = (2,) * (rank - 1) + (16,)
        with torch.no_grad():
            modules[i](torch.randn(*shape))
        recorded[i].add(rank)
        stats["records"] += 1

    def tune(i):
        m, model, xs = two_graph_module(ait, torch)
        m.tune(device="cpu")
        for e in calls_ok(torch, m, model, xs):
            errors.append(f"tuned: {e}")
        stats["tunes"] += 1

    def load(i):
        fresh = ait.Module(torch.nn.Sequential(torch.nn.Linear(16, 4)).eval(), saved.name)
        fresh.__wrapped__.load_state_dict(saved_model.state_dict())
        ait.load(fresh, path)
        for e in calls_ok(torch, fresh, saved_model, saved_xs):
            errors.append(f"loaded: {e}")
        stats["loads"] += 1

    @functools.partial(guarded, pause=RANDOM_IDLE_S)
    def tune_then_load(i):  # with idle moments between them, when a switch is not refused
        tune(i)
        stop.wait(RANDOM_IDLE_S)
        load(i)

    workers = (record, record, tune_then_load)
    threads = [threading.Thread(target=f, args=(i,), daemon=True) for i, f in enumerate(workers)]
    for t in threads:
        t.start()
    refused = switched = 0
    started = time.monotonic()
    deadline = time.monotonic() + RANDOM_LIMIT_S
    while time.monotonic() < deadline:  # until n switches and n refusals (tune or load running)
        time.sleep(rng.uniform(0.0, 0.05))
        if switch(aitune_fast, not aitune_fast.is_aitune_patched()) is None:
            switched += 1
        else:
            refused += 1
        if min(switched, refused) >= int(n):
            break
    stop.set()
    hung = []
    for t in threads:
        t.join(120)
        if t.is_alive():
            hung.append(t.name)
    lost = {i: (len(m.graph_specs), len(recorded[i])) for i, m in modules.items() if i in recorded}
    return {
        "errors": sorted(set(errors))[:10],
        "n_errors": len(errors),
        "hung": hung,
        "switched": switched,
        "refused": refused,
        "seconds": round(time.monotonic() - started, 1),
        "graphs_vs_ranks": {str(i): list(v) for i, v in lost.items()},
        "keys": sorted({w for m in modules.values() for w in key_worlds(m)}),
        "patched": aitune_fast.is_aitune_patched(),
        **stats,
    }


def jit_mode(workdir):
    """A switch while a JIT-patched module tunes itself in another thread (after the recording call that completed
    its samples): refused, and every call after it succeeds, as do the switches after it."""
    ait, torch, aitune_fast, quiescence = setup()
    from aitune.torch.tune_strategy import OneBackendStrategy

    class MLP(torch.nn.Module):  # not an nn.Sequential: AITune's JIT patcher skips containers
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.a(x)

    ait.jit_config.strategy = quick_strategy(ait)
    ait.jit_config.min_samples = 2
    ait.jit_config.device = "cpu"
    model = ait.patch_for_jit_tuning(lambda: MLP().eval())()
    # two graphs (inputs of rank 2 and 3), two samples each
    xs = [
        torch.randn(*shape, generator=torch.Generator().manual_seed(i))
        for i, shape in enumerate([(1, 16), (1, 2, 16), (2, 16), (2, 2, 16)])
    ]
    gate = Gate()
    stock_tune = OneBackendStrategy.tune
    seen = []

    def held_tune(self, *args, **kwargs):
        seen.append(1)
        if len(seen) == 2:  # between the two graphs: the first graph's backend is in tune()'s own dict
            gate.armed = True
            gate.hold()
        return stock_tune(self, *args, **kwargs)

    OneBackendStrategy.tune = held_tune

    def first_calls():
        with torch.no_grad():
            return [model(x).shape[0] for x in xs]  # the call that completes the samples tunes the module

    caller, call_box = in_thread(first_calls)
    gate.entered.wait(60)
    out = {"tuning_held": gate.entered.is_set()}
    out.update(refused=switch(aitune_fast, True), patched_during=aitune_fast.is_aitune_patched())
    gate.release.set()
    caller.join(120)
    OneBackendStrategy.tune = stock_tune
    out["call_error"] = call_box.get("error")

    def calls() -> list[str]:
        errors = []
        with torch.no_grad():
            for x in xs:
                try:
                    if not torch.allclose(model(x), model.a(x), atol=1e-6):
                        errors.append("wrong output")
                except Exception as exc:  # noqa: BLE001 - reported to the parent
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
        return errors

    out["errors_after"] = calls()
    out["refused_after"] = switch(aitune_fast, True)
    out["errors_patched"] = calls()
    out["refused_unpatch"] = switch(aitune_fast, False)
    out["errors_unpatched"] = calls()
    return out


def fork_mode(workdir, at):
    """Fork while another thread is inside ``patch_aitune()``: the child's AITune calls and switches must return (a
    child that has not reported within CHILD_LIMIT_S is killed and reported as hung)."""
    ait, torch, aitune_fast, quiescence = setup()
    from aitune_fast.patch import _switch

    torch.set_num_threads(1)  # no OpenMP pool to inherit half-used across the fork
    # the held call returns once the forked child has reported, which under CPU load can take longer than a switch
    # waits by default (it was refused then, and the parent stayed stock): it may wait as long as the child may run
    quiescence.CALLS_IN_FLIGHT_LIMIT_S = CHILD_LIMIT_S + 30.0
    gate, paused = Gate(), Gate()
    held = ait.Module(held_mlp(torch, gate), "held", strategy=quick_strategy(ait))
    x = torch.randn(2, 16)
    if at == "waiting":  # the switch waits for the held call (its gates closed, the lock held)
        gate.armed = True
        call, _ = in_thread(held, x)
        gate.entered.wait(30)
    else:  # the switch is inside its journaled steps
        convert = _switch.convert_live_objects

        def held_convert(*args, **kwargs):
            paused.hold()
            return convert(*args, **kwargs)

        _switch.convert_live_objects = held_convert
        paused.armed = True
    switcher, switch_box = in_thread(switch, aitune_fast, True)
    time.sleep(0.5) if at == "waiting" else paused.entered.wait(30)
    lock = aitune_fast.patch._state.LOCK
    free = lock.acquire(blocking=False)
    if free:
        lock.release()
    out = {"parent_switching": switcher.is_alive() and not free}
    out["child"] = run_forked(lambda: forked_child(ait, torch, aitune_fast))
    gate.release.set()
    paused.release.set()
    switcher.join(60)
    out["parent_switch_error"] = switch_box.get("error") or switch_box.get("value")  # an error, or the refusal
    out["parent_patched"] = aitune_fast.is_aitune_patched()
    return out


CHILD_LIMIT_S = 60


def run_forked(body) -> dict:
    """``body()`` in a forked child; its result, or how it ended."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            result = {"value": body()}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + CHILD_LIMIT_S
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return {"hung": True}
        time.sleep(0.05)
    with os.fdopen(read, "rb") as pipe:
        return json.loads(pipe.read() or b'{"error": "no report"}')


def forked_child(ait, torch, aitune_fast) -> dict:
    """In the child: a new module records and is called, then both switches; each step's outcome."""
    out = {"patched_at_fork": aitune_fast.is_aitune_patched()}
    m = ait.Module(torch.nn.Linear(16, 4).eval(), "child", strategy=quick_strategy(ait))
    x = torch.randn(3, 16)
    with torch.no_grad():
        out["call_ok"] = bool(torch.equal(m(x), m.__wrapped__(x)))
        out["keys_unpatched"] = key_worlds(m)
        aitune_fast.patch_aitune()
        out["patched"] = aitune_fast.is_aitune_patched()
        out["keys_patched"] = key_worlds(m)
        out["patched_call_ok"] = bool(torch.equal(m(x), m.__wrapped__(x)))
        aitune_fast.unpatch_aitune()
        out["unpatched"] = not aitune_fast.is_aitune_patched()
        out["keys_back"] = key_worlds(m)
        out["names"] = name_worlds()
    return out


HOOK_CALLERS = 3  # threads calling the hooked module
HOOK_PAUSE_S = 0.004  # the longest pause between two switches (seeded), while the callers run


def hooked_module(ait, torch):
    """A tuned one-graph module (TorchEager) whose wrapped module has a forward pre-hook and a forward hook, which
    count their calls; (module, wrapped module, input, counts, the hooks' ids)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 4)).eval()
    m = ait.Module(model, f"hooked-{random.random()}", strategy=quick_strategy(ait))
    x = torch.randn(2, 16)
    with torch.no_grad():
        m(x)
    m.tune(device="cpu")
    counts = {"pre": 0, "post": 0}

    def pre(module, args):
        counts["pre"] += 1

    def post(module, args, output):
        counts["post"] += 1

    ids = (model.register_forward_pre_hook(pre).id, model.register_forward_hook(post).id)
    return m, model, x, counts, ids


def hooks_mode(workdir, seed, n):
    """The callers take turns (a lock): no two calls of the module overlap, as stock AITune needs (its
    ``Module._forward`` keeps the hooks it takes out on the shared module: see hook_race). The switches do not take
    the lock: they land at any point of a call."""
    ait, torch, aitune_fast, quiescence = setup()
    rng = random.Random(int(seed))
    m, model, x, counts, (pre_id, post_id) = hooked_module(ait, torch)
    expected = m(x).detach()
    turn = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []
    calls = [0]

    def caller():
        with torch.no_grad():
            while not stop.is_set():
                with turn:
                    try:
                        if not torch.equal(m(x), expected):
                            errors.append("wrong output")
                        calls[0] += 1
                    except Exception as exc:  # noqa: BLE001 - reported to the parent
                        errors.append(f"{type(exc).__name__}: {exc}"[:200])

    problems: list[str] = []

    def check(when: str) -> None:
        with turn:  # no call in flight: the hooks are where they belong and fire once each
            left = (list(model._forward_pre_hooks), list(model._forward_hooks))
            if left != ([pre_id], [post_id]):
                problems.append(f"{when}: hooks left {left}")
            before = dict(counts)
            with torch.no_grad():
                m(x)
            fired = (counts["pre"] - before["pre"], counts["post"] - before["post"])
            if fired != (1, 1):
                problems.append(f"{when}: hooks fired {fired}")
            # a call's end puts the module's forward wrapper of the world in place back (a switch landing in stock's
            # nn.Module.__setattr__ there may leave the other one until the next call, which runs it correctly)
            if model.__dict__.get("forward") is not m._self_proxy_forward:
                problems.append(f"{when}: the wrapped module's forward is not the module's wrapper after a call")
            fast = m._self_proxy_forward._self_wrapper.__func__.__module__.startswith(OURS)
            if fast is not aitune_fast.patch._state.state().call_path:
                problems.append(f"{when}: the module's forward wrapper is {'fast' if fast else 'stock'}")

    moves = {
        "call_path_on": lambda: aitune_fast.patch_aitune(call_path=True),
        "call_path_off": lambda: aitune_fast.patch_aitune(call_path=False),
        "unpatch": aitune_fast.unpatch_aitune,
    }
    threads = [threading.Thread(target=caller, daemon=True) for _ in range(HOOK_CALLERS)]
    for t in threads:
        t.start()
    made = {name: 0 for name in moves}
    refused = 0
    for i in range(int(n)):
        time.sleep(rng.uniform(0.0, HOOK_PAUSE_S))
        name = rng.choice(sorted(moves))
        try:
            moves[name]()
            made[name] += 1
        except aitune_fast.patch.SwitchRefused:
            refused += 1
        check(f"switch {i} ({name})")
    stop.set()
    for t in threads:
        t.join(60)
    check("end")
    return {
        "problems": problems[:10],
        "n_problems": len(problems),
        "errors": sorted(set(errors))[:10],
        "n_errors": len(errors),
        "made": made,
        "refused": refused,
        "calls": calls[0],
        "hooks_fired": counts["post"],
    }


def hook_race_mode(workdir, world):
    """Call A is held inside the wrapped module's forward (AITune's ``Module._forward`` has taken the hooks out and
    keeps them in ``_current_forward_hooks`` on the module); call B, which looked ``forward`` up before A took it
    out, enters ``Module._forward`` then, takes the empty hook dicts for the module's and stores them in the same
    place. Whatever the call path, the later of the two puts back empty dicts: the race is AITune's own."""
    if world == "stock":
        from child_kit import block_aitune_fast

        block_aitune_fast()
    import aitune.torch as ait
    import torch

    if world != "stock":
        import aitune_fast

        aitune_fast.patch_aitune(call_path=world == "on")
    a_inside, release, b_waiting = threading.Event(), threading.Event(), threading.Event()

    class Held(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(16, 4)

        def forward(self, x):
            if threading.current_thread().name == "A" and b_waiting.is_set():
                a_inside.set()
                release.wait(30)
            return self.lin(x)

    model = Held().eval()
    m = ait.Module(model, "raced", strategy=quick_strategy(ait))
    x = torch.randn(2, 16)
    with torch.no_grad():
        m(x)
    m.tune(device="cpu")
    fired: dict[str, list[str]] = {"A": [], "B": []}

    def pre(module, args):
        name = threading.current_thread().name
        fired[name].append("pre")
        if name == "B":  # B has looked `forward` up already; it goes on once A is inside
            b_waiting.set()
            a_inside.wait(30)

    def post(module, args, output):
        fired[threading.current_thread().name].append("post")

    model.register_forward_pre_hook(pre)
    model.register_forward_hook(post)
    boxes = {}
    threads = {}
    for name in ("B", "A"):
        box: dict = {}

        def run(box=box):
            try:
                with torch.no_grad():
                    box["ok"] = bool(torch.equal(m(x), model.lin(x)))
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                box["error"] = f"{type(exc).__name__}: {exc}"[:300]

        threads[name] = threading.Thread(target=run, name=name, daemon=True)
        boxes[name] = box
        threads[name].start()
        if name == "B":
            b_waiting.wait(30)
    threads["B"].join(30)
    release.set()
    threads["A"].join(30)
    return {
        "overlapped": a_inside.is_set(),
        "calls": {name: box for name, box in sorted(boxes.items())},
        "fired": fired,
        "hooks_left": {"pre": len(model._forward_pre_hooks), "post": len(model._forward_hooks)},
    }


def handoff_mode(workdir, start, limit):
    """Call A of the outer module is inside its forward when the switch closes its gates; the forward then hands a
    call of the inner module to a worker thread (a thread pool) and waits for its result. The worker's call meets
    a closed gate while the switch waits for call A."""
    from concurrent.futures import ThreadPoolExecutor

    ait, torch, aitune_fast, quiescence = setup()
    quiescence.CALLS_IN_FLIGHT_LIMIT_S = float(limit)
    if start == "patched":
        aitune_fast.patch_aitune()
    pool = ThreadPoolExecutor(1)
    inside, go = threading.Event(), threading.Event()
    torch.manual_seed(0)
    inner = ait.Module(torch.nn.Sequential(torch.nn.Linear(16, 16)).eval(), "inner", strategy=quick_strategy(ait))

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 4)
            self.held = False

        def forward(self, x):
            if self.held:
                self.held = False
                inside.set()
                go.wait(30)
            return self.lin(pool.submit(inner, x).result())

    model = Outer().eval()
    outer = ait.Module(model, "outer", strategy=quick_strategy(ait))
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = model.lin(inner.__wrapped__(x))
        outer(x)
        inner(x)
    inner.tune(device="cpu")
    outer.tune(device="cpu")
    model.held = True
    with torch.no_grad():
        call, call_box = in_thread(lambda: bool(torch.equal(outer(x), expected)))
        inside.wait(30)
        started = time.monotonic()
        switcher, switch_box = in_thread(switch, aitune_fast, start == "stock")
        while not quiescence.GATES.standing and switcher.is_alive():
            time.sleep(0.001)  # the gates are closed: the worker's call meets one
        held_before = getattr(quiescence.GATES, "_tickets", 0)  # the number of callers held so far
        go.set()
        switcher.join(60)
        switch_s = time.monotonic() - started
        call.join(60)
        out = {
            "held_calls": getattr(quiescence.GATES, "_tickets", 0) - held_before,
            "switch_s": round(switch_s, 2),
            "refused": switch_box.get("value"),
            "switch_error": switch_box.get("error"),
            "call": call_box,
            "patched": aitune_fast.is_aitune_patched(),
            "keys": sorted({w for m in (inner, outer) for w in key_worlds(m)}),
            "after": bool(torch.equal(outer(x), expected)),
        }
    pool.shutdown()
    return out


MODES = {
    "in_flight": in_flight_mode,
    "tune": tune_mode,
    "load": load_mode,
    "equality": equality_mode,
    "interrupts": interrupts_mode,
    "random": random_mode,
    "fork": fork_mode,
    "jit": jit_mode,
    "reentry": reentry_mode,
    "hooks": hooks_mode,
    "hook_race": hook_race_mode,
    "handoff": handoff_mode,
}

if __name__ == "__main__":
    mode, workdir, *rest = sys.argv[1:]
    Path(workdir).mkdir(parents=True, exist_ok=True)
    report(MODES[mode], workdir, *rest)
