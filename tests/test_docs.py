"""The documentation: README is a landing page, the pages under ``docs/`` build into a site with every
warning an error (a broken link or anchor, a page outside the navigation), and the fix reference is
generated from the fixes themselves."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    result = _build(ROOT / "mkdocs.yml", site)
    assert result.returncode == 0, result.stderr[-4000:]
    return site


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(site):
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for page in ("index.html", "install.html", "transformers.html", "reference/fixes.html", "results/index.html",
                 "package.html"):
        assert page in pages, sorted(pages)


@pytest.mark.slow
def test_the_fix_reference_lists_every_fix(site):
    from hf_neuron.adapters import ADAPTERS
    from hf_neuron.patching import all_fixes

    for adapter in ADAPTERS.values():
        importlib.import_module(adapter).register()
    page = (site / "reference" / "fixes.html").read_text()
    missing = [f.name for f in all_fixes() if f"<code>{f.name}</code>" not in page]
    assert not missing and len(all_fixes()) > 100, missing


def test_a_broken_link_fails_the_build(tmp_path):
    """The same settings on a page with a link to a page that does not exist: the build fails."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    settings = [line for line in (ROOT / "mkdocs.yml").read_text().splitlines(keepends=True)]
    # Keep the build settings (strict, validation), drop the navigation and the hooks of the real site.
    text = "".join(settings).split("\nnav:", 1)[0].replace("hooks:\n  - scripts/docs_hooks.py\n", "")
    (tmp_path / "mkdocs.yml").write_text(text)
    result = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0 and "missing.md" in result.stderr, result.stderr[-2000:]
    (docs / "index.md").write_text("# Home\n\nNo links.\n")
    assert _build(tmp_path / "mkdocs.yml", tmp_path / "site").returncode == 0


def test_readme_is_a_landing_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 220, len(lines)
    text = "\n".join(lines)
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name}" in text, f"README does not link docs/{page.name}"
