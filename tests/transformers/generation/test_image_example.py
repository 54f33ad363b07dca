"""scripts/generate_with_image_example.py, as a user runs it on the simulator: the first image compiles the
vision tower and the text decoder's two graphs, an image of another size compiles nothing."""

import os
import subprocess
import sys
from pathlib import Path

from hf_neuron.tiny_models.vision import save_tiny_vision_model

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "generate_with_image_example.py"


def test_the_second_image_size_compiles_nothing(tmp_path):
    model_dir = save_tiny_vision_model("llava", tmp_path / "llava")
    env = dict(os.environ, HF_NEURON_SIMULATOR="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, str(SCRIPT), "--model", str(model_dir), "--max-new-tokens", "4"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert [line.split(" graphs compiled")[0].split(", ")[-1] for line in lines] == ["3", "0"], result.stdout
    assert lines[0].startswith("[640x480 image") and lines[1].startswith("[200x300 image")
