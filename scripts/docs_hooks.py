"""MkDocs hooks: the pages that are not kept under ``docs/``, added when the site is built.

- ``index.md`` is the repository's README (the landing page), its links to ``docs/...`` made site links;
- ``results/`` are the compatibility pages of ``compatibility/`` (written by ``hf-neuron compat``), with
  the data files they link to (``hf_neuron/compat/data``) and a page listing the results files (the
  pages link their folder);
- ``package.md`` is ``hf_neuron/README.md`` (how the package is read and how a fix is written);
- ``reference/fixes.md`` is generated from the fixes themselves (``hf-neuron env --markdown``), on the
  simulated device where no real one exists, so every fix is decided on the installed releases.

Nothing is copied into the source tree: one source per page.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
#: ``(source in the repository, path in the site)`` of the pages kept outside ``docs/``.
PAGES = (("README.md", "index.md"), ("hf_neuron/README.md", "package.md"))
COMPATIBILITY = ROOT / "compatibility"
DATA = ROOT / "hf_neuron" / "compat" / "data"
#: The page that lists the results files, where the compatibility pages link their folder.
RESULTS_INDEX = "hf_neuron/compat/data/results/index.md"

#: Links the landing page and the package page write relative to the repository, made site links.
_LINK = re.compile(r"\]\((?!https?:|#)([^)#\s]+)(#[^)]*)?\)")


def _site_link(target: str, fragment: str | None, page: str) -> str:
    """A repository-relative link of ``page`` (a file at the repository's root or in ``hf_neuron/``)."""
    base = Path(page).parent
    path = os.path.normpath(base / target).replace(os.sep, "/")
    if path.startswith("docs/"):
        path = path.removeprefix("docs/")
    elif path.startswith("compatibility/"):
        path = "results/" + path.removeprefix("compatibility/")
    elif path == "hf_neuron/README.md":
        path = "package.md"
    return f"]({path}{fragment or ''})"


def _rewrite_links(markdown: str, page: str) -> str:
    return _LINK.sub(lambda m: _site_link(m.group(1), m.group(2), page), markdown)


def fix_reference() -> str:
    """The fix reference page, from ``hf-neuron env --markdown`` in a fresh process."""
    env = dict(os.environ)
    env.setdefault("HF_NEURON_SIMULATOR", "1")  # a real torch-neuronx keeps the simulator off
    result = subprocess.run([sys.executable, "-m", "hf_neuron.cli", "env", "--markdown"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0 or not result.stdout.startswith("# Fix reference"):
        raise RuntimeError(f"hf-neuron env --markdown failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return result.stdout


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri.startswith("results/"):
        return markdown.replace("](../hf_neuron/compat/data/results/)", "](../" + RESULTS_INDEX + ")")
    return markdown


def on_files(files, config):
    for source, dest in PAGES:
        content = _rewrite_links((ROOT / source).read_text(), source)
        files.append(File.generated(config, dest, content=content))
    for path in sorted(COMPATIBILITY.iterdir()):
        if path.suffix == ".md":
            files.append(File.generated(config, f"results/{path.name}", content=path.read_text()))
        elif path.suffix in (".png", ".svg"):
            files.append(File.generated(config, f"results/{path.name}", abs_src_path=str(path)))
    for path in sorted(DATA.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".tsv"):
            files.append(File.generated(config, path.relative_to(ROOT).as_posix(), abs_src_path=str(path)))
    results = sorted((DATA / "results").glob("*.json"))
    listing = ["# Committed results files", ""] + [f"- [`{path.name}`]({path.name})" for path in results]
    files.append(File.generated(config, RESULTS_INDEX, content="\n".join(listing) + "\n"))
    files.append(File.generated(config, "reference/fixes.md", content=fix_reference()))
    return files
