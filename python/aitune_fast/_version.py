"""The package version, read from the installed distribution's metadata.

The one place the version is written is ``Cargo.toml``; maturin copies it into the wheel's (and an
editable install's) metadata, and this module reads it back from there.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("aitune_fast")
except PackageNotFoundError:  # the sources on sys.path without any install: no version to report
    __version__ = "0+unknown"
