"""``python -m aitune_fast inspect`` on hostile files: each refused with a clear error, and nothing from the file
imported or run (checked as the codec's tests check it: the payload would create a file, and a module the file names
would create one on import)."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import aitune_fast
import pytest
import torch
from aitune_fast import _inspect
from aitune_fast._inspect import CheckpointError, read_checkpoint

ROOT = Path(__file__).resolve().parents[2]


class Payload:
    """Pickles as ``os.system("touch PATH")``."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def torch_file(data_pkl: bytes) -> bytes:
    """A torch zip checkpoint whose pickle record is `data_pkl`."""
    saved = io.BytesIO()
    torch.save({"a": 1}, saved)
    source = zipfile.ZipFile(io.BytesIO(saved.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            target.writestr(info.filename, data_pkl if info.filename.endswith("/data.pkl") else source.read(info))
    return out.getvalue()


def ait_file(state_dict_pt: bytes) -> bytes:
    """A ``.ait`` checkpoint (AITune's zip) holding `state_dict_pt`."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        target.writestr("state_dict.pt", state_dict_pt)
        target.writestr("x_sha256_sums.txt", "")
    return out.getvalue()


def tuned_state(key: dict) -> dict:
    """The state dict AITune saves for a tuned module with one graph whose key is `key`."""
    backend = {"type": "TorchEagerBackend", "config": {"autocast_enabled": False}}
    tuned = {"backends": [(key, backend)], "check_graph": True, "module_name": "m", "forward_signature": {}}
    return {"": {"type": "Module", "name": "m", "dynamic_shapes": None, "tuned_module": tuned}}


def inspect_cli(path: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    extra_path = (env or {}).get("PYTHONPATH")
    environ = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), *([extra_path] if extra_path else [])])
    )
    return subprocess.run(
        [sys.executable, "-m", "aitune_fast", "inspect", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )


def test_a_pickle_naming_os_system_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"a": Payload(marker)}, path)
    with pytest.raises(CheckpointError, match=r"refused: it names posix\.system"):
        read_checkpoint(path)
    (tmp_path / "evil.ait").write_bytes(ait_file(path.read_bytes()))
    done = inspect_cli(tmp_path / "evil.ait")
    assert done.returncode == 2 and "refused: it names posix.system" in done.stderr, done.stderr
    assert not marker.exists()
    # the payload is real: AITune's loader (weights_only=False) runs it
    subprocess.run([sys.executable, "-c", f"import torch; torch.load({str(path)!r}, weights_only=False)"], check=True)
    assert marker.exists()


def test_a_module_the_file_names_is_not_imported(tmp_path):
    """A pickle naming ``evil_mod.boom``, where importing ``evil_mod`` would create a file."""
    marker = tmp_path / "imported"
    (tmp_path / "evil_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef boom(): pass\n")
    path = tmp_path / "names_a_module.pt"
    path.write_bytes(torch_file(b"\x80\x02cevil_mod\nboom\n)R."))
    done = inspect_cli(path, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2 and "evil_mod.boom" in done.stderr, done.stderr
    assert not marker.exists()


def test_a_payload_inside_a_graph_key_is_refused(tmp_path):
    """AITune stores each key's tensors as pickled bytes: those go through aitune_fast's restricted reader."""
    marker = tmp_path / "pwned"
    key = {"tensor_data": pickle.dumps(((None, Payload(marker)),)), "other_data": pickle.dumps(()), "strict": True}
    path = tmp_path / "key.pt"
    torch.save(tuned_state({**key, "llm_phase": None}), path)
    with pytest.raises(CheckpointError, match=r"graph 0's key refused: .*refused global posix\.system"):
        read_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_a_truncated_checkpoint_is_refused(tmp_path, cut):
    whole = ait_file(torch_file(pickle.dumps({"b": 2}, protocol=2)))
    path = tmp_path / "cut.ait"
    path.write_bytes(whole[: int(len(whole) * cut)])
    # cut at 90%, the inner state_dict.pt's own end record is the last one zipfile finds: torch's reader refuses it
    with pytest.raises(CheckpointError, match="not a readable (zip|checkpoint)"):
        read_checkpoint(path)


def test_a_gigabyte_string_is_refused_without_allocating_it(tmp_path):
    """A pickle record declaring a 1 GiB string (BINUNICODE8) that the file does not hold."""
    path = tmp_path / "big.pt"
    path.write_bytes(torch_file(b"\x80\x04\x8d" + (2**30).to_bytes(8, "little") + b"abc."))
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            read_checkpoint(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak


def test_a_pickle_record_over_the_limit_is_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "large.pt"
    torch.save({"s": "x" * 5000}, path)
    monkeypatch.setattr(_inspect, "MAX_PICKLE_BYTES", 4096)
    with pytest.raises(CheckpointError, match="over the limit of 4096"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "not a readable zip"), (b"not a zip at all", "not a readable zip"), (None, "no such file")],
)
def test_other_files_are_refused(tmp_path, content, message):
    path = tmp_path / "file.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)


def test_a_zip_that_is_not_a_torch_checkpoint_is_refused(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(CheckpointError, match="0 data.pkl records"):
        read_checkpoint(path)


def test_aitunes_value_classes_load_as_inert_stand_ins(tmp_path):
    """A class named as AITune's ``ArtifactPath`` (which a backend's state may hold) is rebuilt as a stand-in that
    keeps its state and runs nothing."""

    class ArtifactPath:
        def __init__(self, root):
            self.root = root

    ArtifactPath.__module__ = "aitune.torch.checkpoint.artifact"
    ArtifactPath.__qualname__ = "ArtifactPath"
    key_module = type(sys)("aitune.torch.checkpoint.artifact")
    key_module.ArtifactPath = ArtifactPath  # type: ignore[attr-defined]
    sys.modules["aitune.torch.checkpoint.artifact"] = key_module
    try:
        path = tmp_path / "artifact.pt"
        torch.save({"a": ArtifactPath(Path("/x"))}, path)
    finally:
        del sys.modules["aitune.torch.checkpoint.artifact"]
    state, _ = _inspect.load_state_dict(path)
    stand_in = state["a"]
    assert type(stand_in).__name__ == "ArtifactPath" and stand_in.state == {"root": Path("/x")}
    assert "aitune.torch.checkpoint.artifact" not in sys.modules


def test_the_cli_reads_a_checkpoint_and_prints_json(tmp_path):
    from aitune_fast import SampleMetadata

    key = SampleMetadata.from_inputs({"x": torch.ones(2, 3)}, strict=True)
    path = tmp_path / "plain.pt"
    torch.save(tuned_state(key.to_dict()), path)
    done = inspect_cli(path, "--json")
    assert done.returncode == 0, done.stderr
    assert '"name": "m"' in done.stdout and "TorchEagerBackend(autocast_enabled=False)" in done.stdout


def test_a_large_checkpoint_gets_a_progress_line(tmp_path, monkeypatch, capsys):
    path = tmp_path / "plain.pt"
    torch.save(tuned_state(aitune_fast.SampleMetadata.from_inputs({"x": torch.ones(2)}).to_dict()), path)
    _inspect.read_checkpoint(path)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_inspect, "PROGRESS_BYTES", 1)
    _inspect.read_checkpoint(path)
    assert capsys.readouterr().err.startswith("aitune_fast inspect: reading plain.pt (")


def test_an_unknown_level_is_refused(tmp_path):
    with pytest.raises(ValueError, match="level must be one of"):
        _inspect.inspect_checkpoint(tmp_path, "loud")
