"""``hf-neuron compat --images``: a vision-language architecture generates from images with the CPU tokens in
the text decoder's graphs plus one vision-tower graph per batch size; without the decoder fix L3 fails on the
count; types without a tiny recipe are recorded as not tested; the table is written beside the text one."""

import pytest

from hf_neuron.compat import image_levels, image_report
from hf_neuron.transformers.generation.image_inputs import DECODER_FIX

from compat_helpers import cli_main, load, records


def _run(tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    rc = cli_main(["compat", "--images", "--no-progress", "--device", "neuron", "--check", "--output", str(out), *args])
    return rc, out


@pytest.mark.distributed  # its L5 level shards the model over 2 torchrun ranks
def test_llava_generates_from_images_in_bounded_graphs_and_fails_without_the_decoder_fix(tmp_path, monkeypatch):
    rc, out = _run(tmp_path, "fixed", "--quick", "--levels", "L1,L2,L3,L5")
    rec = records(out)["llava"]
    assert rc == 0, rec["failure"]
    assert [rec["levels"][lv] for lv in ("L1", "L2", "L3", "L5")] == ["pass"] * 4
    assert rec["details"]["L5"]["tp_size"] == 2 and rec["details"]["L5"]["sharded_fraction"] > 0.4
    details = rec["details"]["L3"]
    assert details["text_graphs_per_batch"] == {"1": 2, "2": 2}
    assert details["vision_graphs_per_batch"] == {"1": 1, "2": 1}
    assert {tuple(run["image_size"]) for run in details["runs"]} == set(image_levels.IMAGE_SIZES)
    assert all(run["tokens"] == run["cpu_tokens"] for run in details["runs"])
    assert load(out)["task"] == "image-text-to-text"

    page = tmp_path / "images.md"
    image_report.update_page(page, [out])
    row = next(line for line in page.read_text().splitlines() if line.startswith("| 12 | `llava`"))
    assert "| 2 / 2 | 1 / 1 |" in row

    monkeypatch.setenv("HF_NEURON_DISABLE", DECODER_FIX)  # the worker processes start without the fix
    rc, out = _run(tmp_path, "unfixed", "--quick", "--levels", "L1,L2,L3")
    rec = records(out)["llava"]
    assert rc == 1 and rec["levels"]["L3"] == "fail"
    assert "text and" in rec["failure"]["reason"] and "vision graphs at batch" in rec["failure"]["reason"]


def test_a_type_without_a_tiny_recipe_is_recorded_as_not_tested(tmp_path):
    rc, out = _run(tmp_path, "gemma3n", "--arch", "gemma3n")
    rec = records(out)["gemma3n"]
    assert rc == 0
    assert set(rec["levels"].values()) == {"skip"} and "no tiny checkpoint recipe" in rec["skip_reasons"]["L1"]
    assert "timm" in rec["skip_reasons"]["L1"]  # and why


@pytest.mark.parametrize("args, message", [
    (["--all"], "--all is the causal-LM sweep"),
    (["--arch", "llama"], "unknown image-text-to-text architecture(s): llama"),
])
def test_bad_selections_say_what_to_pass(tmp_path, capsys, args, message):
    assert cli_main(["compat", "--images", "--no-progress", "--output", str(tmp_path / "x.json"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_text_results_file_is_not_overwritten_by_an_image_run(tmp_path, capsys):
    text = tmp_path / "text.json"
    assert cli_main(["compat", "--no-progress", "--device", "cpu", "--arch", "gpt2", "--levels", "L1",
                     "--output", str(text)]) == 0
    assert cli_main(["compat", "--images", "--no-progress", "--device", "cpu", "--arch", "llava", "--levels", "L1",
                     "--output", str(text)]) == 2
    assert "holds text-generation results, this run is image-text-to-text" in capsys.readouterr().err
