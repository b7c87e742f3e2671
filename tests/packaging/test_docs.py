"""The documentation site: ``mkdocs build --strict`` (no broken link, no missing reference), the API page listing
every public member, and the built site opened in headless Chromium (the API page's members, the chart loading).

mkdocs-material and mkdocstrings come from pyproject.toml's ``docs`` dependency group (scripts/setup.sh installs
them); Chromium is Debian's ``chromium`` (scripts/setup.sh installs it where it can). Where either is missing, or
Chromium cannot run, the tests skip and say why (under CI=true, a missing tool fails instead). The browser test
saves screenshots of the API and performance pages under ``.docs-screenshots/`` (git-ignored) for a reviewer.
"""

from __future__ import annotations

import functools
import html
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import aitune_fast
import aitune_fast.patch
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".docs-screenshots"
CHROMIUM_TIMEOUT_S = 120
PUBLIC = [f"aitune_fast.{name}" for name in aitune_fast.__all__] + [
    f"aitune_fast.patch.{name}" for name in aitune_fast.patch.__all__
]


def _missing(what: str, hint: str) -> None:
    assert not os.environ.get("CI"), f"{what} is missing: {hint}"
    pytest.skip(f"{what} is not installed here: {hint}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with ``mkdocs build --strict``."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            _missing(module, "bash scripts/setup.sh installs pyproject.toml's docs group")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    return out


def _anchors(page: Path) -> set[str]:
    return set(re.findall(r'id="(aitune_fast\.[^"]+)"', page.read_text()))


def _documented(name: str, anchors: set[str]) -> bool:
    """`name` has its own entry, or is the package-level name of one (``aitune_fast.global_context``)."""
    return name in anchors or any(a.endswith("." + name.rsplit(".", 1)[1]) for a in anchors)


def test_docs_build_strict_with_every_page(site: Path) -> None:
    for page in ("getting-started", "aitune", "api", "performance", "json-format", "safety", "internals", "changelog"):
        assert (site / page / "index.html").is_file(), page
    changelog = (site / "changelog" / "index.html").read_text()
    assert "Unreleased" in changelog and "0.1.0" in changelog  # CHANGELOG.md, included
    assert '"$schema"' in html.unescape((site / "json-format" / "index.html").read_text())  # the schema, included
    assert (site / "assets" / "speedups.png").stat().st_size > 10_000


def test_api_page_documents_every_public_member_in_the_seed_order(site: Path) -> None:
    anchors = _anchors(site / "api" / "index.html")
    missing = [name for name in PUBLIC if not _documented(name, anchors)]
    assert not missing, f"not on the API page: {missing}"
    text = (site / "api" / "index.html").read_text()
    seed = ["SampleMetadata", "ExactSampleMetadata", "TensorSpec", "Locator", "batch_tensor", "InfoLevel"]
    seed += ["ObjectType", "patch_aitune", "runtime_info"]
    where = [text.index(f'id="aitune_fast.{name}"') for name in seed]
    assert where == sorted(where), "the API page is not in the order of AITune's API page"


SIGNATURE_WIDTH = 80  # mkdocstrings wraps signatures at 60 columns, with ruff (the docs group brings it)


def test_api_page_signatures_wrap_and_no_rest_markup(site: Path) -> None:
    """Without a formatter (ruff or black) mkdocstrings writes each signature on one line, and a long one runs out
    of the content column behind a horizontal scroll (`from_inputs`'s return type); reST (`:class:`, a `::`
    paragraph end) would show literally."""
    text = (site / "api" / "index.html").read_text()
    blocks = re.findall(r'<div class="doc-signature highlight"><pre>(.*?)</pre>', text, re.S)
    lines = [line for block in blocks for line in html.unescape(re.sub(r"<[^>]+>", "", block)).splitlines()]
    assert len(blocks) > 50, len(blocks)
    too_long = [line for line in lines if len(line) > SIGNATURE_WIDTH]
    assert not too_long, f"signatures not wrapped (is ruff installed?): {too_long[:3]}"
    assert "from_inputs(\n" in "\n".join(lines), "from_inputs's signature is wrapped, one parameter a line"
    words = html.unescape(re.sub(r"<[^>]+>", "", text))
    assert not re.findall(r":(?:class|func|meth|attr|mod|exc):|::\n", words), "reST markup on the API page"


# ------------------------------------------------------------------------------------------ headless Chromium
_CHECK_PAGE = """<!doctype html><html><body><script>
function frame(url) {
  return new Promise(resolve => {
    const f = document.createElement("iframe");
    f.onload = () => resolve(f);
    f.src = url;
    document.body.appendChild(f);
  });
}
function loaded(img) {
  return img.complete ? Promise.resolve() : new Promise(r => { img.onload = r; img.onerror = r; });
}
(async () => {
  const result = {};
  const api = await frame("api/");
  result.ids = Array.from(api.contentDocument.querySelectorAll("[id^='aitune_fast.']"), e => e.id);
  const perf = await frame("performance/");
  const charts = Array.from(perf.contentDocument.images).filter(i => i.src.endsWith("speedups.png"));
  await Promise.all(charts.map(loaded));
  result.charts = charts.map(i => [i.src, i.naturalWidth, i.naturalHeight]);
  const pre = document.createElement("pre");
  pre.id = "result";
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
})();
</script></body></html>
"""


def _chromium() -> list[str]:
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        _missing("Chromium", "bash scripts/setup.sh installs Debian's chromium (apt-get, as root)")
    # root (containers) needs --no-sandbox; no GPU, no first-run or crash-report side effects
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
    probe = subprocess.run([*cmd, "--dump-dom", "about:blank"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 or "<html" not in probe.stdout:
        pytest.skip(f"Chromium cannot run here (exit {probe.returncode}): {probe.stderr.strip()[-500:]}")
    return cmd


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on localhost (frames of the same origin can be read by the check page)."""
    (site / "_check.html").write_text(_CHECK_PAGE)
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def test_site_in_headless_chromium_lists_every_member_and_loads_the_chart(served: str) -> None:
    chromium = _chromium()
    cmd = [*chromium, "--virtual-time-budget=20000", "--dump-dom", served + "_check.html"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=False)
    match = re.search(r'<pre id="result">(.*?)</pre>', proc.stdout, re.S)
    assert match, f"the check page did not finish (exit {proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(html.unescape(match.group(1)))
    anchors = set(result["ids"])
    missing = [name for name in PUBLIC if not _documented(name, anchors)]
    assert not missing, f"the API page, as Chromium renders it, lacks: {missing}"
    assert result["charts"], "the performance page shows no speedups.png"
    for src, width, height in result["charts"]:
        assert width > 100 and height > 100, f"the chart {src} did not load ({width}x{height})"
    SCREENSHOTS.mkdir(exist_ok=True)
    for page in ("api", "performance"):
        shot = [*chromium, "--hide-scrollbars", "--window-size=1280,2400", f"--screenshot={SCREENSHOTS / page}.png"]
        subprocess.run([*shot, f"{served}{page}/"], capture_output=True, timeout=CHROMIUM_TIMEOUT_S, check=False)
