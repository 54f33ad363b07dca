"""Helpers shared by the compatibility-harness tests."""

import json
from pathlib import Path

from hf_neuron.cli import main as cli_main


def run_compat(*args) -> int:
    return cli_main(["compat", "--no-progress", "--device", "cpu", *map(str, args)])


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def records(path: Path) -> dict:
    return {r["model_type"]: r for r in load(path)["architectures"]}


def ran(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split()) for line in log.read_text().splitlines() if line.strip()]
