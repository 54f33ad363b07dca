"""Where the compatibility harness reads its data and writes its results.

What a command reads ships in the package (``data/``): the ranked list and the committed results
tables, so a wheel install finds them too. The published pages (``compatibility/README.md``,
``compatibility/diffusers.md``, the coverage charts) exist only in a source checkout: there a run
with default options writes the committed results and regenerates those pages, as the project does;
anywhere else it writes into the current folder and regenerates nothing.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
RANKING_PATH = DATA_DIR / "top100-text-generation.tsv"
COMMITTED_RESULTS_DIR = DATA_DIR / "results"
COMMITTED_DIFFUSERS_RESULTS_DIR = COMMITTED_RESULTS_DIR / "diffusers"
IMAGE_RANKING_PATH = DATA_DIR / "top20-image-text-to-text.tsv"
COMMITTED_IMAGE_RESULTS_DIR = COMMITTED_RESULTS_DIR / "images"


def source_checkout() -> Path | None:
    """The source checkout this hf_neuron runs from (the folder above the package holds
    ``pyproject.toml`` and ``compatibility/``), or None for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "compatibility").is_dir() else None


def compatibility_dir() -> Path | None:
    """The published pages' folder, ``compatibility/`` of the checkout; None outside a checkout."""
    root = source_checkout()
    return root / "compatibility" if root else None


def default_results_dir(images: bool = False) -> Path:
    """Where a run with default options writes: the committed tables in a checkout, else the current folder
    (``images/`` below either for the image-text-to-text run)."""
    if source_checkout():
        return COMMITTED_IMAGE_RESULTS_DIR if images else COMMITTED_RESULTS_DIR
    return Path.cwd() / "images" if images else Path.cwd()
