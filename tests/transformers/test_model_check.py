"""``hf-neuron check`` on hand-written configs of real checkpoints (no weights): the verdict, the smallest
tensor-parallel degree that fits, the weights, the instance sizes, and one clear line per bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

from hf_neuron import cli
from hf_neuron.commands.check import EXIT_STATUS
from hf_neuron.compat import results as R
from hf_neuron.transformers import model_check

CONFIGS = Path(__file__).parent / "checkpoint_configs"
GIB = 1 << 30

# Published parameter counts (model cards / safetensors index of each checkpoint) and the dtype it is
# sized in, the layout with which generation fits a trn2 NeuronCore (24 GiB at LNC=2): a TP degree, or
# (TP, FSDP) for a mixture of experts that tensor parallelism alone cannot place (None: nothing fits).
# A mixture of experts has its routed experts sharded over the TP group (hf_neuron's default on Neuron).
CHECKPOINTS = {
    # name: (parameters, bytes per parameter, layout for generation on trn2, family)
    "qwen2.5-0.5b": (494_032_768, 2, 1, "dense"),
    "llama-3.1-8b": (8_030_261_248, 2, 1, "dense"),
    "gemma-2-9b": (9_241_705_984, 4, 2, "sliding window, float32"),
    "mamba-2.8b": (2_768_345_600, 4, 1, "state space"),
    "olmo-1b": (1_176_764_416, 4, 1, "dense, outside the top 100"),
    "llama-3.1-405b": (405_853_388_800, 2, (8, 8), "dense, 8 kv heads cap TP at 8"),
    "mixtral-8x7b": (46_702_792_704, 2, 4, "MoE, 8 experts"),
    "mixtral-8x22b": (140_620_634_112, 2, (8, 2), "MoE, one expert per layer larger than a core"),
    "qwen3-30b-a3b": (30_532_122_624, 2, 4, "MoE, 128 experts"),
    "qwen3-235b-a22b": (235_093_634_560, 2, (4, 8), "MoE, 4 kv heads cap TP at 4"),
    "deepseek-v3": (671_026_419_200, 2, 64, "MoE, latent attention, fp8 checkpoint sized dequantized"),
    "jamba-v0.1": (51_570_919_424, 2, 8, "hybrid mamba/attention MoE"),
    "gpt-oss-20b": (20_914_757_184, 2, 2, "MoE, mxfp4 checkpoint sized dequantized"),
    "gpt-oss-120b": (116_829_156_672, 2, (8, 2), "MoE, mxfp4 checkpoint sized dequantized"),
}


@pytest.fixture(scope="module")
def checks():
    return {name: model_check.check_model(str(CONFIGS / f"{name}.json")) for name in CHECKPOINTS}


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_weights_are_the_parameter_count_times_the_dtype_size(checks, name):
    parameters, nbytes, _, _ = CHECKPOINTS[name]
    sizing = checks[name].sizing
    assert sizing.parameters == pytest.approx(parameters, rel=0.01)
    assert sizing.weights_total == pytest.approx(parameters * nbytes, rel=0.01)
    if sizing.tp == 1:
        assert sizing.per_core["weights"] == pytest.approx(parameters * nbytes, rel=0.01)


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_the_layout_is_the_first_that_fits(checks, name):
    sizing = checks[name].sizing
    expected = CHECKPOINTS[name][2]
    tp, fsdp = expected if isinstance(expected, tuple) else (expected, 1)
    assert (sizing.tp, sizing.fsdp if sizing.fits else 1) == (tp, fsdp)
    tried = sizing.layouts_tried
    # every TP degree the heads allow comes first (smallest first), then TP x FSDP by ranks
    assert [t["tp"] for t in tried if t["fsdp"] == 1] == sizing.degrees_tried[:sum(t["fsdp"] == 1 for t in tried)]
    assert [t["tp"] * t["fsdp"] for t in tried if t["fsdp"] > 1] == sorted(t["tp"] * t["fsdp"] for t in tried if t["fsdp"] > 1)
    assert all(t["total"] > sizing.device_bytes for t in tried[:-1])  # every layout before was too big
    if expected is None:
        assert sizing.instances == [] and sizing.limit
    else:
        assert tried[-1]["total"] <= sizing.device_bytes


def test_moe_layouts_name_the_distributed_config_and_the_launch(checks):
    mixtral = checks["mixtral-8x7b"].sizing
    assert (mixtral.ep, mixtral.experts) == (4, 8)
    assert mixtral.distributed_config == "DistributedConfig(tp_size=4)"  # the experts follow the TP group
    assert mixtral.torchrun == "torchrun --nproc_per_node=4 your_script.py"
    assert any("each rank holds 2 of them" in note for note in mixtral.notes)
    qwen = checks["qwen3-235b-a22b"].sizing
    assert qwen.distributed_config == "DistributedConfig(tp_size=4, fsdp_size=8, ep_size=32)"
    assert qwen.per_core["gathered"] > 0  # FSDP gathers a layer at a time
    large_experts = checks["mixtral-8x22b"].sizing
    assert large_experts.distributed_config == "DistributedConfig(tp_size=8, fsdp_size=2)"
    assert any("more than a NeuronCore holds" in note and "2 per expert" in note for note in large_experts.notes)
    assert checks["llama-3.1-8b"].sizing.distributed_config is None and not checks["llama-3.1-8b"].sizing.experts
    # a dense model the heads cap at TP=8 gets FSDP beside it, and a small one the replicas an instance holds
    assert checks["llama-3.1-405b"].sizing.distributed_config == "DistributedConfig(tp_size=8, fsdp_size=8)"
    assert any("trn2.3xlarge has 4 cores: 4 copies of this layout serve side by side" in note
               for note in checks["llama-3.1-8b"].sizing.notes)


def test_a_quantized_checkpoint_is_sized_as_transformers_loads_it_on_neuron(checks):
    for name, method in (("gpt-oss-20b", "mxfp4"), ("deepseek-v3", "fp8")):
        sizing = checks[name].sizing
        assert sizing.dtype == "bfloat16"
        assert any(f"quantization_config {method}: Transformers has no {method} kernels for a neuron device and "
                   "dequantizes the weights to bfloat16" in note for note in sizing.notes), sizing.notes
    # the user's dtype wins
    assert model_check.check_model(str(CONFIGS / "gpt-oss-20b.json"), dtype="float32").sizing.dtype == "float32"


def test_degrees_are_those_the_heads_divide(checks):
    assert checks["qwen2.5-0.5b"].sizing.degrees_tried == [1, 2]  # 14 query, 2 key/value heads
    assert checks["llama-3.1-405b"].sizing.degrees_tried == [1, 2, 4, 8]
    assert "num_key_value_heads=8 does not divide by 16" in checks["llama-3.1-405b"].sizing.limit


def test_instances_that_hold_the_plan(checks):
    assert checks["llama-3.1-8b"].sizing.instances == ["trn2.3xlarge", "trn2.48xlarge"]
    trn3 = model_check.check_model(str(CONFIGS / "gemma-2-9b.json"), instance="trn3")
    assert trn3.sizing.tp == 1 and trn3.sizing.device_bytes == 36 * GIB  # 144 GiB per chip, 4 cores
    assert trn3.sizing.instances == [] and trn3.sizing.chips == 1  # no trn3 size is documented


def test_verdict_comes_from_the_committed_results(checks):
    results, path, _ = model_check.results_for_installed()
    for name in ("llama-3.1-8b", "mamba-2.8b", "mixtral-8x7b"):
        check = checks[name]
        record = R.by_model_type(results)[check.model_type]
        assert check.verdict.results_file == path.name
        assert check.verdict.levels == {lv: record["levels"][lv] for lv in R.LEVELS}
        assert check.verdict.status == ("passes" if R.passes_compiled(record) else "uncompiled")


@pytest.fixture
def without_olmo(monkeypatch):
    """The installed release's results without OLMo's record (an ``--all`` sweep records every causal-LM
    type; a top-100 file has none for OLMo)."""
    results, path, note = model_check.results_for_installed()
    kept = {**results, "architectures": [r for r in results["architectures"] if r["model_type"] != "olmo"]}
    monkeypatch.setattr(model_check, "results_for_installed", lambda images=False: (kept, path, note))
    return results


def test_an_architecture_outside_the_results_is_not_tested(checks, without_olmo):
    check = model_check.check_model(str(CONFIGS / "olmo-1b.json"))
    assert check.verdict.status == "not_tested"
    assert "hf-neuron compat --arch olmo" in check.verdict.summary
    # With its record (every causal-LM type of an --all sweep), the verdict is the record's.
    record = R.by_model_type(without_olmo).get("olmo")
    if record is not None:
        assert checks["olmo-1b"].verdict.levels == {lv: record["levels"][lv] for lv in R.LEVELS}


def test_tp_plan_source_and_fixes(checks):
    assert checks["llama-3.1-8b"].tp_plan == "transformers"
    assert checks["mamba-2.8b"].tp_plan == "hf_neuron"
    names = {f["name"] for f in checks["mamba-2.8b"].fixes}
    assert {"mamba-chunk-scan-initial-state", "transformers.tp_plan.mamba", "static-cache-recurrent-only"} <= names
    assert "static-sliding-window-cache" not in names
    assert "static-sliding-window-cache" in {f["name"] for f in checks["gemma-2-9b"].fixes}
    assert "mamba-chunk-scan-initial-state" not in {f["name"] for f in checks["llama-3.1-8b"].fixes}


def test_sft_plans_a_training_step():
    check = model_check.check_model(str(CONFIGS / "qwen2.5-0.5b.json"), task="sft")
    per_core = check.sizing.per_core
    # a gradient per parameter (the weights also count buffers), AdamW's two moments per gradient
    assert 0.99 * per_core["weights"] <= per_core["gradients"] <= per_core["weights"]
    assert per_core["optimizer"] == 2 * per_core["gradients"]
    assert [g["tokens"] for g in check.sizing.graphs] == list(range(128, 1025, 128))  # TRL pads to 128 on Neuron
    assert "trl" in {f["scope"] for f in check.fixes}


def test_sft_check_and_plan_train_size_the_same_step():
    """check --task sft traces two layers and extrapolates; plan --train traces the whole model: the same
    graphs (counted once, the same way) and the same activations, at TRL's default max_length. A model
    whose layers differ (Gemma 2's sliding and full attention) is scaled from its kept layers instead,
    an upper bound that says so."""
    from trl import SFTConfig

    from hf_neuron.transformers.plan import DEFAULT_SFT_MAX_LENGTH, plan_training

    assert DEFAULT_SFT_MAX_LENGTH == {f.name: f.default for f in dataclasses.fields(SFTConfig)}["max_length"]
    path = str(CONFIGS / "olmo-1b.json")
    check, plan = model_check.check_model(path, task="sft").sizing, plan_training(path)
    assert check.graph_count == plan.graph_count and check.graphs == [dataclasses.asdict(g) for g in plan.graphs]
    assert abs(check.per_core["activations"] - plan.memory.activations) <= 0.10 * plan.memory.activations
    assert any("traced at 2 and 4 layers and extrapolated to 16" in note for note in check.notes)

    gemma = model_check.check_model(str(CONFIGS / "gemma-2-9b.json"), task="sft", max_length=256).sizing
    assert any("scaled to every layer" in note and "upper bound" in note for note in gemma.notes)


def _run(capsys, *argv):
    status = cli.main(["check", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_prints_the_answer_and_its_exit_status(capsys):
    status, out, err = _run(capsys, str(CONFIGS / "llama-3.1-8b.json"))
    assert status == EXIT_STATUS["passes"] == 0
    assert "tensor parallel 1: the smallest degree that fits" in out and "trn2.3xlarge" in out
    assert err == ""  # nothing but the answer (no upstream warnings)
    status, out, _ = _run(capsys, str(CONFIGS / "llama-3.1-405b.json"), "--json", "--dtype", "float32")
    data = json.loads(out)
    assert status == EXIT_STATUS["does_not_fit"] and data["outcome"] == "does_not_fit"
    assert data["sizing"]["fits"] is False


def test_cli_not_tested_exit_status(capsys, without_olmo):
    status, out, _ = _run(capsys, str(CONFIGS / "olmo-1b.json"))
    assert status == EXIT_STATUS["not_tested"] and "hf-neuron compat --arch olmo" in out


def test_state_space_model_prints_no_upstream_warnings(capsys):
    results, _, _ = model_check.results_for_installed()
    compiled = R.passes_compiled(R.by_model_type(results)["mamba"])  # Mamba ran eagerly on 5.23
    status, out, err = _run(capsys, str(CONFIGS / "mamba-2.8b.json"))
    assert status == EXIT_STATUS["passes" if compiled else "uncompiled"]
    assert err == "" and "causal_conv1d" not in out


def test_a_hub_id_in_the_local_cache(capsys, monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    snapshot = tmp_path / "models--acme--tiny-llama" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((CONFIGS / "qwen2.5-0.5b.json").read_text())
    (tmp_path / "models--acme--tiny-llama" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-llama" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    status, out, _ = _run(capsys, "acme/tiny-llama")
    assert status == 0 and "acme/tiny-llama (local Hugging Face cache)" in out


def _bad(tmp_path):
    folder = tmp_path / "empty-folder"
    folder.mkdir()
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "future.json").write_text(json.dumps({"model_type": "llama9000", "hidden_size": 8}))
    (tmp_path / "vision.json").write_text(json.dumps({"model_type": "vit"}))
    llama = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    (tmp_path / "no-hidden-size.json").write_text(json.dumps({k: v for k, v in llama.items() if k != "hidden_size"}))
    (tmp_path / "bert.json").write_text(json.dumps({  # bert-base-uncased's config
        "architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}))
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    (pipeline / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    good = str(CONFIGS / "llama-3.1-8b.json")
    return [
        ([str(tmp_path / "no-hidden-size.json")], "missing_field", "has no hidden_size"),
        ([str(tmp_path / "bert.json")], "not_text_generation", "BertForMaskedLM, not a text-generation head"),
        ([str(pipeline)], "diffusers_pipeline", "hf-neuron compat diffusers"),
        ([good, "--max-cache-len", "200000"], "cache_too_long", "--max-cache-len 131072 or less"),
        ([good, "--dtype", "bf17"], "bad_dtype", "unknown dtype 'bf17'"),
        ([str(tmp_path / "nowhere" / "config.json")], "missing_path", "no such file or folder"),
        ([str(folder)], "no_config", "has no config.json"),
        (["acme/not-downloaded"], "not_in_cache", "hf download acme/not-downloaded config.json"),
        ([str(tmp_path / "future.json")], "unknown_model_type", "'llama9000' is not known"),
        ([good, "--instance", "trn9"], "unknown_instance", "use one of trn2, trn2u, trn3"),
        ([str(tmp_path / "broken.json")], "bad_config", "is not a JSON config"),
        ([str(tmp_path / "vision.json")], "not_text_generation", "no text-generation class"),
        ([good, "--image-size", "448x448"], "bad_images", "llama takes no images (no vision tower)"),
    ]


def test_bad_input_is_one_line_and_a_distinct_status(capsys, monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    seen, cases = set(), _bad(tmp_path)
    for argv, kind, words in cases:
        status, out, err = _run(capsys, *argv)
        assert status == EXIT_STATUS[kind], (argv, err)
        assert out == "" and err.count("\n") == 1 and words in err and "Traceback" not in err, err
        seen.add(status)
    assert seen == {EXIT_STATUS[kind] for _, kind, _ in cases} and not seen & {0, 1, 2, 3, 4, 5}


def test_dtype_names_take_the_usual_aliases_and_the_source_is_said(capsys):
    status, out, _ = _run(capsys, str(CONFIGS / "llama-3.1-8b.json"), "--dtype", "bf16")
    assert status == 0 and "parameters in bfloat16 (--dtype), 14.96 GiB of weights" in out
    # gemma-2-9b's config says float32: bfloat16 would fit on one core, and the answer says so
    status, out, _ = _run(capsys, str(CONFIGS / "gemma-2-9b.json"))
    assert "in float32 (the config's torch_dtype)" in out
    assert "in bfloat16 (--dtype bf16, half the bytes) it fits at TP=1 (1 core(s): trn2.3xlarge) instead" in out


def test_a_vision_language_checkpoint_gets_the_verdict_of_generation_from_images(tmp_path):
    from hf_neuron.tiny_models.vision import save_tiny_vision_model

    check = model_check.check_model(str(save_tiny_vision_model("llava", tmp_path / "llava")))
    assert check.verdict.results_file == "images/5.25.0-simulated.json" or check.verdict.status == "not_tested"
    if check.verdict.status != "not_tested":  # the installed release has image results
        assert check.verdict.summary.endswith("(compiled generation from images equals CPU)")
    else:
        assert "hf-neuron compat --images --arch llava" in check.verdict.summary
    assert any(g["kind"] == "vision" for g in check.sizing.graphs)


def test_vision_graphs_and_weights_are_sized_as_plan_sizes_them(tmp_path, capsys):
    """A fixed-size tower (LLaVA) is traced at its own input size; a dynamic-resolution one (Qwen2-VL)
    needs the processed sizes, and check says so rather than leaving the vision graphs out silently;
    with --image-size it gets plan's graphs (one per bucket of patch counts). The weights are the whole
    vision-language model's, tower included."""
    from transformers import AutoModelForImageTextToText

    from hf_neuron.tiny_models.vision import save_tiny_vision_model
    from hf_neuron.transformers.plan import plan_generation

    llava = save_tiny_vision_model("llava", tmp_path / "llava")
    check = model_check.check_model(str(llava))
    planned = plan_generation(str(llava))
    assert [g for g in check.sizing.graphs if g["kind"] == "vision"] == [
        dataclasses.asdict(g) for g in planned.graphs if g.kind == "vision"] != []
    assert check.sizing.per_core["activations"] == planned.memory.activations
    with torch.device("meta"):
        whole = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(llava))
    assert check.sizing.weights_total == sum(p.numel() * p.element_size() for p in whole.parameters()) + sum(
        b.numel() * b.element_size() for b in whole.buffers())

    qwen2_vl = str(save_tiny_vision_model("qwen2_vl", tmp_path / "qwen2_vl"))
    status, out, _ = _run(capsys, qwen2_vl)
    assert status == 0 and "vision" not in out.split("graphs per rank:")[1].splitlines()[0]
    assert "give --image-size HxW per processed size to plan its vision graphs" in out
    status, out, _ = _run(capsys, qwen2_vl, "--image-size", "224x224,448x448")
    graphs = [g for g in model_check.check_model(qwen2_vl, image_sizes=[(224, 224), (448, 448)]).sizing.graphs
              if g["kind"] == "vision"]
    assert status == 0 and [g["bucket_of"] for g in graphs] == [((224, 224),), ((448, 448),)]
    assert f"vision patches [{graphs[0]['tokens']}] (batch 1)" in out and "bucket of patch counts" in out
    status, _, err = _run(capsys, qwen2_vl, "--task", "sft", "--image-size", "224x224")
    assert status == EXIT_STATUS["bad_images"] and "--task sft plans text SFT" in err


def test_a_fit_near_the_whole_core_is_called_tight(checks, capsys):
    assert checks["mixtral-8x7b"].sizing.tight  # 92% of the core
    assert not checks["qwen3-30b-a3b"].sizing.tight  # 60%
    status, out, _ = _run(capsys, str(CONFIGS / "mixtral-8x7b.json"))
    assert status == 0 and "tight: less than 10% of the core is left for the Neuron runtime" in out


def test_notes_are_words_not_internal_errors(checks):
    import re

    for name, check in checks.items():
        for note in check.sizing.notes:
            assert not re.search(r"0x[0-9a-f]{6,}|Traceback|AssertionError", note), (name, note)


def test_check_starts_no_simulated_device(tmp_path):
    """check reads a config and builds meta models: with HF_NEURON_SIMULATOR=1 set, no simulated device is
    installed for it (on a fresh install that would build the simulator's extension first)."""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom hf_neuron.cli import main\n"
            f"status = main(['check', {str(CONFIGS / 'qwen2.5-0.5b.json')!r}])\n"
            "print('simulated device:', 'hf_neuron.simulator.device' in sys.modules, 'status:', status)\n")
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "HF_NEURON_SIMULATOR": "1"},
                            capture_output=True, text=True, timeout=300)
    assert "simulated device: False status: 0" in result.stdout, result.stderr[-3000:]
