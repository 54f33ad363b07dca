"""scripts/diffusers_tp_example.py (the announcement's recipe) on a tiny local pipeline, 2 ranks on the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

from diffusers_adapter_helpers import device_has_conv

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "diffusers_tp_example.py"


def test_tp_example_saves_an_image(tmp_path):
    model_dir, image_path = tmp_path / "tiny-pipeline", tmp_path / "image.png"
    subprocess.run([sys.executable, str(SCRIPT), "--make-tiny", str(model_dir)], check=True, timeout=600,
                   capture_output=True)
    env = {**os.environ, "HF_NEURON_SIMULATOR": "1", "OMP_NUM_THREADS": "1"}
    # The recipe decodes on the device; the simulator cannot run the VAE's convolutions yet.
    vae_device = "neuron" if device_has_conv() else "cpu"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
           str(model_dir), "--dtype", "float32", "--height", "32", "--width", "32", "--steps", "2",
           "--vae-device", vae_device, "--out", str(image_path)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-6000:]
    assert "rank 0 saved" in result.stdout
    with Image.open(image_path) as image:
        assert image.size == (32, 32)
