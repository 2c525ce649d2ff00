"""The Cosmos 3 family on `tiny-cosmos3` (same diffusers classes, a few thousand parameters) and the real
configs on the meta device: building and loading, training == inference conditioning, adapters that plain
diffusers loads, parameter and FLOP counts."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from worldtune.config import LoraConfig
from worldtune.models.build import build_pipeline
from worldtune.models.cosmos3 import forward_flops, recipe_objective
from worldtune.models.family import family_of
from worldtune.models.registry import get_spec
from worldtune.train.adapters import apply_training_mode
from worldtune.train.flow import FlowBatch, FlowMatchingLoss

FRAMES, HEIGHT, WIDTH, FPS = 17, 64, 112, 16.0  # 5 latent frames of 4 x 7 latents (the model pads 7 to 8)
PROMPT = "A robot arm stacks a red cube on a blue one."


@pytest.fixture(scope="module")
def model_dir(tiny_cosmos3_dir):
    return tiny_cosmos3_dir


@pytest.fixture(scope="module")
def pipe(model_dir):
    from diffusers import Cosmos3OmniPipeline

    return Cosmos3OmniPipeline.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def family():
    return family_of(get_spec("tiny-cosmos3"))


def test_model_init_writes_a_folder_plain_diffusers_loads(pipe):
    built = build_pipeline(get_spec("tiny-cosmos3"), seed=0)
    assert type(pipe).__name__ == "Cosmos3OmniPipeline" and type(pipe.transformer).__name__ == "Cosmos3OmniTransformer"
    assert pipe.vae.config.z_dim == 48 and pipe.transformer.config.latent_channel == 48
    assert not pipe.config.default_use_system_prompt  # NVIDIA trains and ships Cosmos 3 without the system prompt
    loaded = pipe.transformer.state_dict()
    for k, v in built.transformer.state_dict().items():
        assert torch.equal(loaded[k], v), k


@pytest.mark.parametrize("name,total,towers,lora_r16", [
    # total = 2 towers' layers + one shared vocabulary embedding and LM head + latent/action heads
    ("cosmos3-edge", 3_369_657_024, 2.0e9, 6_422_528),  # "4B": two Nemotron-2B-sized towers
    ("cosmos3-nano", 15_173_136_576, 8.2e9, 15_335_424),  # "16B": two Qwen3-VL-8B-sized text towers
])
def test_real_configs_on_meta_match_the_published_sizes(name, total, towers, lora_r16):
    from worldtune.models.params import count_params

    fam = family_of(get_spec(name))
    model = fam.build_transformer("meta")
    pc = count_params(model, fam.lora_targets, rank=16)  # NVIDIA's LoRA recipe: rank 16 on four projections
    assert pc.total == total
    cfg = get_spec(name).transformer
    shared = 2 * cfg["vocab_size"] * cfg["hidden_size"]  # embed_tokens + lm_head
    tower = (total - shared - sum(p.numel() for n, p in model.named_parameters() if n.startswith(("action_", "proj_", "time_")))) / 2 + shared
    assert tower == pytest.approx(towers, rel=0.03)  # each tower alone is the published backbone size
    assert pc.lora == lora_r16 and pc.targeted_modules == 4 * cfg["num_hidden_layers"]
    names = fam.generator_parameters(model)
    assert not any(".to_q." in n or ".mlp.up_proj" in n or "embed_tokens" in n for n in names)  # reasoner excluded
    assert any("mlp_moe_gen" in n for n in names) and "proj_in.weight" in names


def _capture_transformer_calls(pipe):
    calls = []
    handle = pipe.transformer.register_forward_hook(lambda m, a, kw, out: calls.append((kw, out)), with_kwargs=True)
    return calls, handle


@pytest.mark.parametrize("mode,num_cond", [("text2world", 0), ("image2world", 1), ("video2world", 2)])
def test_training_prediction_is_the_pipeline_transformer_call(pipe, family, mode, num_cond):
    """The training path (cached token ids + FlowBatch -> family.predict) rebuilds exactly the sequence, rotary
    positions, timesteps and conditioning frames of the pipeline's own denoising step, bit for bit."""
    frames = [np.random.RandomState(i).randint(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8) for i in range(FRAMES)]
    cond = {"text2world": {}, "image2world": {"image": Image.fromarray(frames[0])},
            "video2world": {"video": [Image.fromarray(f) for f in frames]}}[mode]
    calls, handle = _capture_transformer_calls(pipe)
    try:
        pipe(PROMPT, num_frames=FRAMES, height=HEIGHT, width=WIDTH, fps=FPS, num_inference_steps=2, guidance_scale=1.0,
             output_type="latent", generator=torch.Generator().manual_seed(0), **cond)
    finally:
        handle.remove()
    kw, out = calls[1]  # the second step: a sigma well inside (0, 1)
    x_t = kw["vision_tokens"][0]
    t = x_t.shape[2]
    sigma = float(kw["vision_timesteps"][0]) / 1000  # the pipeline feeds timestep = sigma * 1000 (as an integer)
    assert float(pipe.scheduler.sigmas[1]) * 1000 == pytest.approx(float(kw["vision_timesteps"][0]), abs=1.0)
    text = family.encode_prompts(pipe, [PROMPT], "tokens", num_frames=FRAMES, height=HEIGHT, width=WIDTH, fps=FPS)
    ids = text[0, 0][text[0, 0] >= 0]
    assert torch.equal(ids, kw["input_ids"])
    cond_mask = (torch.arange(t) < num_cond).float().view(1, 1, t, 1, 1)
    batch = FlowBatch(x_t=x_t, target=torch.zeros_like(x_t), timestep=cond_mask * 1e-4 + (1 - cond_mask) * sigma,
                      condition_mask=cond_mask.expand(1, 1, t, *x_t.shape[3:]), loss_mask=1 - cond_mask,
                      text_keep=torch.ones(1), sigma=torch.tensor([sigma]), num_cond=torch.tensor([num_cond]))
    with torch.no_grad():
        pred = family.predict(pipe.transformer, batch, text, torch.float32, FPS)
    assert torch.equal(pred, out[0][0])
    assert pred[:, :, :num_cond].abs().sum() == 0 and pred[:, :, num_cond:].abs().sum() > 0


def test_dropped_text_is_the_empty_caption_without_metadata(pipe, family):
    text = family.encode_prompts(pipe, [PROMPT, '{"subject": "a robot"}'], "tokens", num_frames=FRAMES,
                                 height=HEIGHT, width=WIDTH, fps=FPS)
    empty, _ = pipe.tokenize_prompt("", add_resolution_template=False, add_duration_template=False)
    for row in text:
        assert row[1][row[1] >= 0].tolist() == empty
    plain = pipe.text_tokenizer.decode(text[0, 0][text[0, 0] >= 0])
    structured = pipe.text_tokenizer.decode(text[1, 0][text[1, 0] >= 0])
    assert f"{HEIGHT}x{WIDTH} resolution" in plain and "FPS" in plain
    assert "resolution" not in structured  # JSON captions carry their own metadata (NVIDIA appends none)


def _lora_transformer(model_dir, mode="lora", rank=4, alpha=8.0):
    from diffusers import Cosmos3OmniTransformer

    tr = Cosmos3OmniTransformer.from_pretrained(model_dir, subfolder="transformer")
    params = apply_training_mode(tr, mode, LoraConfig(rank=rank, alpha=alpha), family_of(get_spec("tiny-cosmos3")))
    return tr, params


def _train_batch(family, pipe, seed=0):
    x0 = torch.randn(2, 48, 5, 4, 7, generator=torch.Generator().manual_seed(seed))
    text = family.encode_prompts(pipe, [PROMPT, "a cup"], "tokens", num_frames=FRAMES, height=HEIGHT, width=WIDTH,
                                 fps=FPS)
    objective = FlowMatchingLoss(**{**recipe_objective(HEIGHT, WIDTH), "cond_frames_probs": ((1, 1.0),)})
    return objective, objective.prepare(x0, [seed, seed + 1]), text


@pytest.mark.parametrize("mode", ["lora", "dora"])
def test_adapter_step_changes_only_the_generator_adapters(model_dir, pipe, family, mode):
    tr, params = _lora_transformer(model_dir, mode)
    before = {n: p.detach().clone() for n, p in tr.named_parameters()}
    assert all(any(t in n for t in family.lora_targets) for n, p in tr.named_parameters() if p.requires_grad)
    objective, batch, text = _train_batch(family, pipe)
    opt = torch.optim.AdamW(params, lr=1e-2)
    loss = objective.loss(family.predict(tr, batch, text, torch.float32, FPS), batch)
    loss.backward()
    opt.step()
    changed = {n for n, p in tr.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert any("lora_B" in n for n in changed)


def test_exported_adapter_loads_in_plain_diffusers_with_alpha(model_dir, pipe, family, tmp_path):
    from diffusers import Cosmos3OmniTransformer

    from worldtune.train.export import save_adapter

    tr, params = _lora_transformer(model_dir, rank=4, alpha=8.0)  # alpha != rank: a reload assuming alpha = rank differs
    with torch.no_grad():
        for p in params:
            p.normal_(0, 0.2)
    _, batch, text = _train_batch(family, pipe, seed=3)
    with torch.no_grad():
        want = family.predict(tr, batch, text, torch.float32, FPS)
    save_adapter(tmp_path / "adapter", tr, get_spec("tiny-cosmos3"), "fp")

    plain = Cosmos3OmniTransformer.from_pretrained(model_dir, subfolder="transformer")
    # plain diffusers, no worldtune code (the model-level loader needs the file name to pick safetensors)
    plain.load_lora_adapter(tmp_path / "adapter", weight_name="pytorch_lora_weights.safetensors")
    with torch.no_grad():
        got = family.predict(plain, batch, text, torch.float32, FPS)
        base = family.predict(Cosmos3OmniTransformer.from_pretrained(model_dir, subfolder="transformer"), batch, text,
                              torch.float32, FPS)
    assert (want - base).abs().max() > 1e-3  # the adapter matters
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    tr.fuse_lora(lora_scale=1.0)  # the fused export: base weights with the adapter merged in
    tr.unload_lora()
    tr.save_pretrained(tmp_path / "fused")
    with torch.no_grad():
        fused = family.predict(Cosmos3OmniTransformer.from_pretrained(tmp_path / "fused"), batch, text, torch.float32, FPS)
    torch.testing.assert_close(fused, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", ["edge", "nano"])
def test_forward_flops_match_flop_counter(pipe, family, variant):
    """The analytic count equals FlopCounterMode on both MLP variants (relu2 / Edge, SwiGLU / Nano), with and
    without conditioning frames, at an odd latent width the model pads."""
    from diffusers import Cosmos3OmniTransformer

    from worldtune.models.cosmos3 import transformer_inputs

    cfg = dict(get_spec("tiny-cosmos3").transformer)
    if variant == "nano":
        cfg.update(hidden_act="silu", qk_norm_for_text=True, use_und_k_norm_for_gen=False)
    torch.manual_seed(0)
    model = Cosmos3OmniTransformer(**cfg).eval()
    ids = family.encode_prompts(pipe, [PROMPT], "tokens", num_frames=FRAMES, height=HEIGHT, width=WIDTH, fps=FPS)[0, 0]
    ids = ids[ids >= 0]
    for num_cond in (0, 2):
        x_t = torch.randn(1, 48, 5, HEIGHT // 16, WIDTH // 16)
        kwargs = transformer_inputs(model.config, ids, x_t, torch.full((5,), 0.5), num_cond, FPS)
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(**kwargs)
        want = counter.get_total_flops()
        got = forward_flops(cfg, FRAMES, HEIGHT, WIDTH, text_tokens=len(ids), cond_frames=num_cond).total
        assert abs(got - want) / want < 0.01, (variant, num_cond, got, want)


def test_model_info_reports_cosmos3_numbers():
    from worldtune.models.info import model_numbers

    n = model_numbers(get_spec("cosmos3-edge"), 93, 480, 832, lora_rank=16)
    assert n["tokens"] == 24 * 15 * 26  # 24 latent frames x (480/32) x (832/32)
    assert n["params"] == 3_369_657_024 and n["lora_params"] == 6_422_528
    assert n["train_step_flops"] == 3 * n["forward_flops"] and 0 < n["attention_share"] < 1
    assert n["generator_params"] < n["params"] / 2  # the reasoner tower and the shared vocabulary stay frozen


def test_recipe_objective_follows_nvidia_by_resolution():
    assert recipe_objective(256, 448)["shift"] == 3.0
    assert recipe_objective(480, 832)["shift"] == 5.0
    assert recipe_objective(720, 1280)["shift"] == 10.0
    loss = FlowMatchingLoss(**{**recipe_objective(480, 832), "shift": 1.0})
    t = torch.tensor([float(loss._time(torch.Generator().manual_seed(s))) for s in range(4000)])
    assert t.min() >= 0 and t.max() <= 1
    assert t.mean() == pytest.approx(0.5, abs=0.02)  # the waver density is symmetric about 0.5
    # peaked in the middle: the central fifth holds far more than a uniform draw's 20 %
    assert ((t - 0.5).abs() < 0.1).float().mean() > 0.3
    assert dataclasses.replace(loss, shift=5.0).shift_sigma(torch.tensor(0.5)) == pytest.approx(5 / 6)
    assert math.isclose(sum(p for _, p in recipe_objective(480, 832)["cond_frames_probs"]), 1.0)
