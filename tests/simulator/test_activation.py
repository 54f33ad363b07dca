"""How the simulator switches on: HF_NEURON_SIMULATOR in every process, never over a real torch-neuronx."""

import os
import subprocess
import sys
import textwrap


def run(code: str, env: dict, cwd=None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "HF_NEURON_SIMULATOR"}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_environment_variable_activates_at_import_torch():
    out = run("import torch; print(torch.ones(1, device='neuron').device, hasattr(torch, 'neuron'))",
              {"HF_NEURON_SIMULATOR": "1"})
    assert out.stdout.strip() == "neuron:0 True", out.stderr


def test_off_by_default():
    out = run("import torch, sys; print(hasattr(torch, 'neuron'), 'torch_neuronx' in sys.modules)", {})
    assert out.stdout.strip() == "False False", out.stderr


def test_torchrun_worker_starts_on_local_rank():
    out = run("import torch; print(torch.neuron.current_device(), torch.empty(1, device='neuron').device)",
              {"HF_NEURON_SIMULATOR": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert out.stdout.strip() == "1 neuron:1", out.stderr


def test_never_shadows_a_real_torch_neuronx(tmp_path):
    fake = tmp_path / "torch_neuronx"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    code = """
        import torch, torch_neuronx
        print(getattr(torch_neuronx, 'REAL', False), hasattr(torch, 'neuron'))
    """
    env = {"HF_NEURON_SIMULATOR": "1", "PYTHONPATH": str(tmp_path)}
    assert run(code, env).stdout.strip() == "True False"
    forced = run(code, {**env, "HF_NEURON_SIMULATOR": "force"})
    assert forced.stdout.strip() == "True True", forced.stderr


def test_unchanged_user_script_generates_cpu_tokens(tmp_path):
    """The acceptance script: import torch_neuronx, device_map="neuron", static-cache greedy generate."""
    code = f"""
        import torch
        import torch_neuronx
        from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
        LlamaForCausalLM(cfg).save_pretrained({str(tmp_path)!r})
        ids = torch.tensor([[5, 9, 17, 33, 2, 8]])
        kw = dict(max_new_tokens=6, do_sample=False, cache_implementation="static", pad_token_id=0)
        cpu = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}).generate(ids, **kw)
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, device_map="neuron")
        assert all(p.device.type == "neuron" for p in model.parameters())
        out = model.generate(ids.to("neuron"), **kw)
        print("equal", torch.equal(cpu, out.cpu()))
    """
    out = run(code, {"HF_NEURON_SIMULATOR": "1"})
    assert "equal True" in out.stdout, out.stderr[-3000:]
