"""The compatibility levels of an image-text-to-text architecture: the text levels, with an image.

Every level compares the device against a CPU reference of the same tiny checkpoint (built with its
processor by :mod:`hf_neuron.tiny_models.vision`, loaded twice), on prompts that hold an image:

- L1 builds the tiny checkpoint and processor, loads the model with ``device_map=<device>``: every
  parameter and buffer on the device.
- L2 eager forward of a prompt with an image: logits within a tight tolerance of CPU.
- L3 greedy ``generate`` with the Neuron defaults of prompts with an image at two image sizes, at batch
  1 and 2: the CPU tokens, and per batch size at most the text decoder's 2 graphs plus one vision-tower
  graph per image bucket: the processed size (a fixed-size processor's resize gives one), or for a
  tower that takes the images' grid, the padded patch count (:mod:`hf_neuron.transformers.generation.vision_grid`).
- L4 one training step on a prompt with an image, eager and compiled: loss and gradients as on CPU.
- L5 (``hf_neuron.compat.tp_worker``) tensor parallel TP=2 under torchrun, on a prompt with an image, equals
  a single device (logits and greedy tokens), where the model has a TP plan.
"""

from __future__ import annotations

from pathlib import Path

from hf_neuron.compat import levels as text_levels
from hf_neuron.compat import results as R
from hf_neuron.compat.levels import ArchRun, LevelFailure, describe_exception
from hf_neuron.graphs import count_graphs
from hf_neuron.testing.generation_workload import is_text_graph
from hf_neuron.transformers.generation.image_inputs import vision_bucket

#: Three image sizes (height, width) of different aspect ratios; a fixed-size processor gives all one shape,
#: and for a tiny Qwen-VL the third has more patches than the second (60 vs 48) in the same bucket (64).
IMAGE_SIZES = ((40, 30), (64, 96), (48, 80))
PROMPTS = {1: ["The quick brown fox jumps over"], 2: ["The", "The quick brown fox jumps over the lazy dog again"]}
TEXT_GRAPHS_PER_BATCH = text_levels.L3_GRAPHS_PER_SHAPE
#: Room for the image tokens of tiling processors (a few tiles of 16 patches each) besides the text.
L3_MAX_CACHE_LEN = 256
L3_CHECK = (f"greedy generate of prompts with an image at {' and '.join(f'{h}x{w}' for h, w in IMAGE_SIZES)} "
            f"pixels, at batch 1 and (left-padded) batch 2, max_cache_len {L3_MAX_CACHE_LEN}, prefill "
            f"chunk {text_levels.L3_PREFILL_CHUNK}: tokens equal CPU, at most {TEXT_GRAPHS_PER_BATCH} text graphs "
            "plus one vision-tower graph per image bucket (processed size, or padded patch count), per batch size")
NO_RECIPE = ("not tested yet: hf_neuron.tiny_models.vision has no tiny checkpoint recipe for it (a processor sized "
             "to match a tiny vision tower)")


class ImageArchRun(ArchRun):
    """The levels of one image-text-to-text architecture."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.processor = None

    def run(self, levels: list[str]) -> dict:
        from hf_neuron.tiny_models.vision import NO_RECIPE_BECAUSE, RECIPES

        if self.spec.model_type not in RECIPES:
            because = NO_RECIPE_BECAUSE.get(self.spec.model_type)
            for lv in R.LEVELS:
                R.set_level(self.record, lv, "skip", reason=f"{NO_RECIPE}: {because}" if because else NO_RECIPE)
            self.record["testable"] = False
            return self._finish(0.0)
        return super().run(levels)  # L5 runs in the tensor-parallel phase, as for text

    def _images(self, batch: int, size: tuple[int, int]):
        from hf_neuron.tiny_models.vision import random_image

        return [random_image(*size, seed=10 * batch + i) for i in range(batch)]

    def _inputs(self, batch: int, size: tuple[int, int]):
        from hf_neuron.tiny_models.vision import float32_pixels, vision_recipe

        recipe = vision_recipe(self.spec.model_type)
        images = [[image] for image in self._images(batch, size)]  # one image per prompt
        inputs = self.processor(text=[recipe.prompt(text) for text in PROMPTS[batch]], images=images,
                                return_tensors="pt", padding=True)
        inputs.pop("labels", None)  # PaliGemma's processor makes training labels: the levels set their own
        return float32_pixels(inputs)

    def _on(self, inputs, device):
        return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in inputs.items()}

    # ---- L1 --------------------------------------------------------------------------------
    def level_l1(self) -> dict:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from hf_neuron.tiny_models.vision import save_tiny_vision_model, vision_recipe

        try:
            self.model_dir = Path(save_tiny_vision_model(self.spec.model_type, self.workdir / self.spec.model_type))
        except Exception as exc:
            reason, op = describe_exception(exc, stage="tiny model")
            raise LevelFailure(reason, op or "hf_neuron.tiny_models.vision") from exc
        self.processor = AutoProcessor.from_pretrained(self.model_dir)
        self.load_cpu_and_device(AutoModelForImageTextToText)
        self.record["model_class"] = type(self.cpu_model).__name__
        return {"parameters": sum(p.numel() for p in self.cpu_model.parameters()),
                "tp_plan": bool(getattr(self.cpu_model, "supports_tp_plan", False)),
                "processor": type(self.processor).__name__,
                "image_sizing": vision_recipe(self.spec.model_type).image_sizing}

    # ---- L2 --------------------------------------------------------------------------------
    def level_l2(self) -> dict:
        import torch

        inputs = self._inputs(2, IMAGE_SIZES[0])
        with torch.no_grad():
            ref = self.cpu_model(**inputs).logits.float()
            self.stage("forward with an image on device")
            out = self.dev_model(**self._on(inputs, self.device)).logits.float().cpu()
        if out.shape != ref.shape:
            raise LevelFailure(f"logits shape {tuple(out.shape)} != CPU {tuple(ref.shape)}")
        diff, scale = (out - ref).abs().max().item(), ref.abs().max().item()
        details = {"max_abs_diff": diff, "max_abs_logit": scale, "prompt_tokens": inputs["input_ids"].shape[1]}
        if not torch.isfinite(out).all() or diff > text_levels.LOGITS_ATOL + text_levels.LOGITS_RTOL * scale:
            exc = LevelFailure(f"logits with an image differ from CPU: max abs diff {diff:.3g} (max |logit| {scale:.3g})")
            exc.details = details
            raise exc
        return details

    # ---- L3 --------------------------------------------------------------------------------
    def generation_kwargs(self) -> tuple[dict, str]:
        kwargs, how = super().generation_kwargs()
        kwargs = {**kwargs, "max_cache_len": L3_MAX_CACHE_LEN}
        if self.dev_model.config.is_encoder_decoder:
            # Florence-2: the prompt is the encoder's, and hf_neuron leaves the decoder's start token unchunked
            # (upstream's chunked prefill of an encoder-decoder loses the padding of left-padded rows).
            kwargs.pop("prefill_chunk_size", None)
        return kwargs, how

    def level_l3(self) -> dict:
        import torch

        from hf_neuron.transformers.generation.defaults import generation_compiles

        compiles, eager_reason = generation_compiles(self.dev_model)
        kwargs, how = self.generation_kwargs() if compiles else ({}, "plain generate (the model does not compile)")
        common = {"max_new_tokens": text_levels.NEW_TOKENS, "min_new_tokens": text_levels.NEW_TOKENS,
                  "do_sample": False}
        text_levels._reset_compiler()
        runs, per_batch, mismatches = [], {}, []
        for batch in sorted(PROMPTS):
            counts = per_batch.setdefault(batch, {"text": 0, "vision": 0, "image_buckets": []})
            for size in IMAGE_SIZES:
                inputs = self._inputs(batch, size)
                shape = list(inputs["pixel_values"].shape)
                bucket = vision_bucket(self.dev_model, inputs)
                if bucket not in counts["image_buckets"]:
                    counts["image_buckets"].append(bucket)
                with torch.no_grad():
                    ref = self.cpu_model.generate(**inputs, **common)
                self.stage(f"generate with a {size[0]}x{size[1]} image on device: batch {batch}")
                with torch.no_grad(), count_graphs() as counted:
                    out = self.dev_model.generate(**self._on(inputs, self.device), **common, **kwargs)
                text = sum(1 for r in counted.records if is_text_graph(r))
                counts["text"] += text
                counts["vision"] += counted.count - text
                run = {"batch": batch, "image_size": list(size), "pixel_values": shape, "graphs": counted.count,
                       "tokens": out[:, -text_levels.NEW_TOKENS:].cpu().tolist(),
                       "cpu_tokens": ref[:, -text_levels.NEW_TOKENS:].tolist()}
                runs.append(run)
                if run["tokens"] != run["cpu_tokens"]:
                    mismatches.append(run)
        graphs = sum(c["text"] + c["vision"] for c in per_batch.values())
        self.record["graphs_compiled"]["L3"] = graphs
        path = text_levels.PATH_COMPILED if graphs else text_levels.PATH_EAGER
        details = {"path": path, "graphs": graphs, "generate": how, "runs": runs,
                   "graphs_per_batch": {str(b): c["text"] + c["vision"] for b, c in per_batch.items()},
                   "text_graphs_per_batch": {str(b): c["text"] for b, c in per_batch.items()},
                   "vision_graphs_per_batch": {str(b): c["vision"] for b, c in per_batch.items()},
                   "image_buckets_per_batch": {str(b): len(c["image_buckets"]) for b, c in per_batch.items()},
                   "max_cache_len": L3_MAX_CACHE_LEN, "prefill_chunk_size": text_levels.L3_PREFILL_CHUNK}
        if path == text_levels.PATH_EAGER:
            details["eager_reason"] = eager_reason or "generate did not call a compiled forward"
        if mismatches:
            run = mismatches[0]
            exc = LevelFailure(f"greedy tokens with a {run['image_size'][0]}x{run['image_size'][1]} image differ from "
                               f"CPU eager (batch {run['batch']}): {run['tokens']} vs {run['cpu_tokens']}", op="generate")
            exc.details = details
            raise exc
        for batch, c in per_batch.items():
            if path == text_levels.PATH_COMPILED and not c["text"]:
                exc = LevelFailure(f"generate with images compiled the vision tower but not the text decoder at batch "
                                   f"{batch}: every decoding step ran uncompiled", op="generate")
                exc.details = details
                raise exc
            allowed = TEXT_GRAPHS_PER_BATCH + len(c["image_buckets"])
            if c["text"] + c["vision"] > allowed:
                exc = LevelFailure(
                    f"generate with images compiled {c['text']} text and {c['vision']} vision graphs at batch {batch} "
                    f"(at most {TEXT_GRAPHS_PER_BATCH} text graphs plus one per image bucket: {allowed})",
                    op="generate")
                exc.details = details
                raise exc
        return details

    # ---- L4 --------------------------------------------------------------------------------
    def _train_step(self, model, inputs, device, call=None):
        model.zero_grad(set_to_none=True)
        on = self._on(inputs, device)
        out = (model if call is None else call)(**on, labels=on["input_ids"])
        out.loss.backward()
        grads = {n: (p.grad.detach().float().cpu() if p.grad is not None else None)
                 for n, p in model.named_parameters() if p.requires_grad}
        return float(out.loss.detach().float().cpu()), grads

    def _compare_step(self, what, loss, grads, ref_loss, ref_grads) -> dict:
        """The text levels' comparison, where a compiled step's all-zero gradient stands for CPU's none.

        A vision-language model reads the vision tower's hidden states at a chosen layer, so the layers
        after it get no gradient; an AOTAutograd backward returns zeros for them where eager returns None.
        """
        zeros = [n for n, g in grads.items() if ref_grads.get(n) is None and g is not None and not g.any()]
        details = super()._compare_step(what, loss, {n: (None if n in zeros else g) for n, g in grads.items()},
                                        ref_loss, ref_grads)
        if zeros:
            details["zero_gradients_where_cpu_has_none"] = len(zeros)
        return details

    def level_l4(self) -> dict:
        import torch

        inputs = self._inputs(2, IMAGE_SIZES[0])
        for model in (self.cpu_model, self.dev_model):
            text_levels._zero_stochastic(model)
            model.train()
        try:
            ref_loss, ref_grads = self._train_step(self.cpu_model, inputs, "cpu")
            details = {"cpu_loss": ref_loss}
            self.stage("eager training step with an image on device")
            loss, grads = self._train_step(self.dev_model, inputs, self.device)
            details["eager"] = self._compare_step("eager training step", loss, grads, ref_loss, ref_grads)
            text_levels._reset_compiler()
            compiled = torch.compile(self.dev_model, backend="neuron" if self.device != "cpu" else "eager",
                                     dynamic=False, fullgraph=False)
            self.stage("compiled training step with an image on device")
            with count_graphs() as counted:
                loss, grads = self._train_step(self.dev_model, inputs, self.device, call=compiled)
            self.record["graphs_compiled"]["L4"] = counted.count
            details["graphs"] = counted.count
            details["compiled"] = self._compare_step("compiled training step", loss, grads, ref_loss, ref_grads)
            return details
        finally:
            for model in (self.cpu_model, self.dev_model):
                model.zero_grad(set_to_none=True)
                model.eval()
