"""Check one built aitune_fast wheel without installing it; exit status 1 on any finding.

    python scripts/inspect_wheel.py WHEEL --python-tag cp310 --repo SOURCE_TREE [--max-glibc 2.28] [--auditwheel PATH]

Checks: the file name's tags (the interpreter's own cpXY, a manylinux platform tag); the contents (the
package, one extension module, the Apache-2.0 LICENSE byte for byte under ``.dist-info/licenses/``, no
vendored shared library); the metadata (``Requires-Dist: torch``, the license expression, the version
written in ``Cargo.toml``); the extension's ELF dynamic section (needs only the C runtime: no libtorch or
libc10, no RPATH/RUNPATH, so nothing ties it to the builder's venv); the highest glibc symbol version the
extension needs (its ``GLIBC_x.y`` version references) is within its manylinux tag and, with ``--max-glibc``,
the tag and the symbols are at most that glibc (``manylinux_2_28`` or older for 2.28). With ``--auditwheel``, prints
``auditwheel show`` and checks that it agrees with the manylinux tag. Uses pyelftools (auditwheel's
dependency) to read the ELF file.
"""

from __future__ import annotations

import argparse
import email.parser
import io
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from packaging.version import Version  # auditwheel depends on it: in the tools venv and the workflow

# what the extension may need at run time: the C runtime, present on every manylinux system
ALLOWED_NEEDED = re.compile(
    r"^(libc\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux[-\w.]*\.so\.\d)$"
)
# the glibc of the legacy manylinux tags (PEP 600 spells the others out: manylinux_2_28_x86_64 is glibc 2.28)
LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
NAME = re.compile(r"^aitune_fast-(?P<version>[^-]+)-(?P<py>cp\d+)-(?P<abi>cp\d+t?)-(?P<plat>[\w.]+)\.whl$")


def cargo_version(repo: Path) -> str:
    """Cargo.toml's version as maturin writes it into the wheel: PEP 440's normal form (0.2.0-dev.0 -> 0.2.0.dev0;
    scripts/release_tools.sh's package_version, for the shell scripts)."""
    text = (repo / "Cargo.toml").read_text()
    match = re.search(r'^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    if not match:
        raise SystemExit("no [package] version in Cargo.toml")
    return str(Version(match.group(1)))


def tag_glibc(plat: str) -> tuple[int, int] | None:
    """The glibc a manylinux platform tag promises to run on, e.g. (2, 28) for manylinux_2_28_x86_64."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", plat)
    if m:
        return int(m[1]), int(m[2])
    return LEGACY_GLIBC.get(plat.split("_", 1)[0])


def glibc_needed(elf: ELFFile) -> tuple[int, int]:
    """The highest ``GLIBC_x.y`` symbol version the ELF file references: the oldest glibc it loads on."""
    versions = [(2, 0)]
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", aux.name)
                    if m:
                        versions.append((int(m[1]), int(m[2])))
    return max(versions)


def fmt(version: tuple[int, int] | None) -> str:
    return "?" if version is None else f"{version[0]}.{version[1]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--python-tag", required=True, help="the interpreter's tag, e.g. cp310")
    ap.add_argument("--repo", type=Path, required=True, help="the source tree it was built from")
    ap.add_argument("--auditwheel", help="path of the auditwheel program")
    ap.add_argument("--max-glibc", help="the newest glibc the tag and the symbols may need, e.g. 2.28")
    args = ap.parse_args()
    max_glibc = tuple(int(x) for x in args.max_glibc.split(".")) if args.max_glibc else None
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("  ok    " if ok else "  FAIL  ") + what)
        if not ok:
            problems.append(what)

    whl = args.wheel
    size = whl.stat().st_size
    print(f"{whl.name}  ({size / 1e6:.2f} MB)")
    m = NAME.match(whl.name)
    check(m is not None, "file name has the form aitune_fast-VERSION-cpXY-cpXY-PLATFORM.whl")
    if m is None:
        return 1
    version = cargo_version(args.repo)
    check(m["version"] == version, f"version {m['version']} is Cargo.toml's ({version})")
    check(m["py"] == m["abi"] == args.python_tag, f"built for its own interpreter: {m['py']}-{m['abi']}")
    plats = m["plat"].split(".")
    check(
        all(re.fullmatch(r"manylinux_\d+_\d+_\w+|manylinux\d+_\w+", p) for p in plats),
        f"platform tag is manylinux: {m['plat']}",
    )
    plat_glibc = [tag_glibc(p) for p in plats]
    if max_glibc:
        check(
            all(g is not None and g <= max_glibc for g in plat_glibc),
            f"manylinux tag for glibc {', '.join(map(fmt, plat_glibc))}: {fmt(max_glibc)} or older",
        )
    check(size < 5_000_000, f"size {size / 1e6:.2f} MB under 5 MB (nothing vendored)")

    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        dist_info = f"aitune_fast-{m['version']}.dist-info"
        shared = [n for n in names if re.search(r"\.so(\.|$)", n)]
        check(
            len(shared) == 1 and re.fullmatch(r"aitune_fast/_core\.cpython-\d+t?-[\w-]+\.so", shared[0]) is not None,
            f"one shared library, the extension: {shared}",
        )
        check(not any(n.startswith("aitune_fast.libs/") or "/lib/" in n for n in names), "no vendored libraries")
        check("aitune_fast/__init__.py" in names and "aitune_fast/bench/__main__.py" in names, "package and bench")
        lic = f"{dist_info}/licenses/LICENSE"
        check(lic in names, f"{lic} present")
        if lic in names:
            check(zf.read(lic) == (args.repo / "LICENSE").read_bytes(), "LICENSE is the repository's, byte for byte")
            check(b"Apache License" in zf.read(lic) and b"Version 2.0, January 2004" in zf.read(lic), "Apache-2.0")
        meta = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())
        requires = meta.get_all("Requires-Dist") or []
        base = [r for r in requires if "extra ==" not in r]
        check(any(re.match(r"torch\b", r) for r in base), f"declares torch: {base}")
        check(meta.get("License-Expression") == "Apache-2.0", f"License-Expression: {meta.get('License-Expression')}")
        check(meta.get("Version") == version, f"metadata version {meta.get('Version')}")
        extras = meta.get_all("Provides-Extra") or []
        check("bench" in extras, f"extras: {extras}")
        so_bytes = zf.read(shared[0]) if shared else b""

    if so_bytes:
        elf = ELFFile(io.BytesIO(so_bytes))
        needed, paths = [], []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                        paths.append(f"{tag.entry.d_tag}={getattr(tag, 'rpath', None) or tag.runpath}")
        check(all(ALLOWED_NEEDED.match(n) for n in needed), f"NEEDED only the C runtime: {needed}")
        check(not any(re.search(r"torch|c10|cuda", n) for n in needed), "no libtorch/libc10/CUDA in NEEDED")
        check(not paths, f"no RPATH/RUNPATH: {paths or 'none'}")
        needs = glibc_needed(elf)
        tag_ok = all(g is not None and needs <= g for g in plat_glibc)
        check(tag_ok, f"highest glibc symbol version GLIBC_{fmt(needs)}: within the tag ({m['plat']})")
        if max_glibc:
            check(needs <= max_glibc, f"highest glibc symbol version GLIBC_{fmt(needs)} <= {fmt(max_glibc)}")

    if args.auditwheel:
        with tempfile.TemporaryDirectory() as tmp:
            res = subprocess.run(
                [args.auditwheel, "show", str(whl)], capture_output=True, text=True, cwd=tmp, check=False
            )
        text = " ".join((res.stdout + res.stderr).split())
        print("  auditwheel show: " + text)
        consistent = re.search(r"consistent with the following platform tag: \"?(\S+?)\"?\.", text)
        check(
            res.returncode == 0 and consistent is not None and consistent.group(1) in plats,
            "auditwheel agrees with the platform tag",
        )

    if problems:
        print(f"{whl.name}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
