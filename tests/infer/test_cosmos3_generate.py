"""`worldtune generate` on Cosmos 3 (`tiny-cosmos3`): the plain `Cosmos3OmniPipeline.__call__` with worldtune's
seeds, conditioning and adapters; resume; adapters of another base refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.infer.conftest import random_frames, write_image
from worldtune.config import LoraConfig, WorldtuneConfig
from worldtune.data.video import read_frames, write_video
from worldtune.errors import GenerationError
from worldtune.infer.generate import Settings, generate_video, run, to_uint8
from worldtune.models.cpu_conv3d import route_conv3d_to_onednn
from worldtune.models.family import family_of
from worldtune.models.registry import get_spec

H, W, F, FPS = 32, 48, 9, 16.0  # 3 latent frames of 2 x 3 latents
PROMPT = "A robot arm picks up the red cube."
STEPS, GUIDANCE = 3, 7.0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    from worldtune.cli import app

    out = tmp_path_factory.mktemp("c3gen") / "tiny-cosmos3"
    result = CliRunner().invoke(app, ["model", "init", "tiny-cosmos3", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def pipe(model_dir):
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(model_dir), dtype="fp32")  # what `worldtune generate` loads on the CPU
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def plain(model_dir):
    """The pipeline as plain diffusers loads it, no worldtune code."""
    from diffusers import Cosmos3OmniPipeline

    pipe = Cosmos3OmniPipeline.from_pretrained(model_dir)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def adapter(model_dir, tmp_path_factory) -> Path:
    """A LoRA (alpha != rank) on the family's generator targets, written by worldtune's export path."""
    from diffusers import Cosmos3OmniTransformer

    from worldtune.models.load import fingerprint
    from worldtune.train.adapters import apply_training_mode
    from worldtune.train.export import save_adapter

    spec = get_spec("tiny-cosmos3")
    tr = Cosmos3OmniTransformer.from_pretrained(model_dir, subfolder="transformer")
    params = apply_training_mode(tr, "lora", LoraConfig(rank=4, alpha=8.0), family_of(spec))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    out = tmp_path_factory.mktemp("c3adapter") / "lora_a"
    save_adapter(out, tr, spec, fingerprint(tr))
    return out


def _settings(mode: str) -> Settings:
    return Settings(mode=mode, height=H, width=W, num_frames=F, fps=FPS, steps=STEPS, guidance=GUIDANCE,
                    negative_prompt=None, cond_latent_frames=1, cond_timestep=1e-4, resize="pad",
                    max_sequence_length=512, sampler="pipeline", batch_guidance=False, dtype="float32", device="cpu",
                    compile=False, fused_adaln=False)


def test_the_pipeline_draws_worldtune_noise_from_a_cpu_generator(pipe):
    """Cosmos3.generate hands the pipeline a CPU generator instead of `latents=` (which would skip mixing in the
    conditioning frames): diffusers' randn_tensor with it is exactly worldtune's initial_noise, on any device."""
    from diffusers.utils.torch_utils import randn_tensor

    from worldtune.models.latents import initial_noise

    shape = family_of(get_spec("tiny-cosmos3")).latent_shape(pipe, F, H, W)
    assert shape == (1, 48, 3, 2, 3)
    drawn = randn_tensor(shape, generator=torch.Generator("cpu").manual_seed(7), device=torch.device("cpu"),
                         dtype=torch.float32)
    assert torch.equal(drawn, initial_noise(7, shape))
    assert not torch.equal(drawn, initial_noise(8, shape))
    # the pipeline's own latent shape is the family's
    x0 = pipe._encode_video(torch.zeros(1, 3, F, H, W))
    assert tuple(x0.shape) == shape


CAPTION = '{"subject": "a robot arm", "action": "picks up the red cube"}'  # structured: carries its own metadata


@pytest.mark.parametrize("mode", ["text2world", "image2world", "video2world"])
@pytest.mark.usefixtures("reference_conv3d")
def test_generation_equals_the_plain_pipeline_call(pipe, plain, mode, monkeypatch):
    """Same prompt, conditioning, size, fps, steps, guidance and seed as a user's direct call of the pipeline.
    text2world uses a structured (JSON) caption, which gets no metadata sentences, as in the cache; video2world
    keeps one latent frame clean (the pipeline's default is two). worldtune VAE-encodes only the conditioning
    frame where the pipeline encodes all F: the Wan VAE is causal in time, so the result is the same."""
    clip = random_frames(F, H, W, seed=4)
    frames = {"text2world": None, "image2world": clip[:1], "video2world": clip[:1]}[mode]
    prompt = CAPTION if mode == "text2world" else PROMPT
    family = family_of(get_spec("tiny-cosmos3"))
    encoded = []
    encode = pipe.vae.encode
    monkeypatch.setattr(pipe.vae, "encode", lambda x, **k: encoded.append(x.shape[2]) or encode(x, **k))
    ours = generate_video(pipe, family, _settings(mode), frames, prompt, None, None, seed=5)
    assert encoded == ([] if mode == "text2world" else [1])

    kw = {"text2world": {"add_resolution_template": False, "add_duration_template": False},
          "image2world": {"image": Image.fromarray(clip[0])},
          "video2world": {"video": [Image.fromarray(f) for f in clip], "condition_frame_indexes_vision": [0]}}[mode]
    direct = plain(prompt, num_frames=F, height=H, width=W, fps=FPS, num_inference_steps=STEPS,
                   guidance_scale=GUIDANCE, generator=torch.Generator().manual_seed(5), output_type="np", **kw).video
    assert ours.shape == (F, H, W, 3) and ours.dtype == np.uint8  # decoded to uint8 on the device
    np.testing.assert_array_equal(ours, to_uint8(direct))
    if mode == "image2world":
        other = generate_video(pipe, family, _settings(mode), frames, prompt, None, None, seed=6)
        assert np.abs(other.astype(np.int16) - ours).mean() > 0.25  # the seed matters


def assert_image2world_equal(pipe, plain) -> None:
    """worldtune's image-to-world videos of `pipe` equal a plain pipeline call's frames bit for bit, seeds 5-7."""
    family = family_of(get_spec("tiny-cosmos3"))
    for seed in (5, 6, 7):
        image = random_frames(1, H, W, seed=seed - 1)
        ours = generate_video(pipe, family, _settings("image2world"), image, PROMPT, None, None, seed=seed)
        direct = plain(PROMPT, image=Image.fromarray(image[0]), num_frames=F, height=H, width=W, fps=FPS,
                       num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                       generator=torch.Generator().manual_seed(seed), output_type="np").video
        np.testing.assert_array_equal(ours, to_uint8(direct), err_msg=f"seed {seed}")


@pytest.mark.usefixtures("one_thread")
def test_pytorch_kernel_switch_gives_the_plain_pipeline_frames_bit_for_bit(model_dir, plain, monkeypatch):
    """`WORLDTUNE_CPU_CONV3D=pytorch` leaves the VAE's 3-D convolutions on PyTorch's own kernel choice, as a plain
    pipeline does: on one CPU thread the frames equal the plain call's bit for bit. (With oneDNN, the default, seeds
    5 and 6 here differ from the plain call by one level in a few pixels. On two threads seed 6 still differs in one
    value by one level: PyTorch picks its kernel by the input's shape, and worldtune encodes only the conditioning
    frame where the pipeline encodes the whole clip; docs/generate.md says so.)"""
    from worldtune.models.load import load_pipeline

    monkeypatch.setenv("WORLDTUNE_CPU_CONV3D", "pytorch")
    pipe, _ = load_pipeline(str(model_dir), dtype="fp32")
    pipe.set_progress_bar_config(disable=True)
    assert_image2world_equal(pipe, plain)


def test_a_plain_pipeline_with_worldtunes_kernels_gives_worldtunes_frames(pipe, model_dir):
    """The other way to equality: a plain pipeline whose VAE is routed as worldtune's (the default, oneDNN) is."""
    from diffusers import Cosmos3OmniPipeline

    routed = Cosmos3OmniPipeline.from_pretrained(model_dir)
    routed.set_progress_bar_config(disable=True)
    route_conv3d_to_onednn(routed.vae)
    assert_image2world_equal(pipe, routed)


# ------------------------------------------------------------------------------------------- end to end
def _cfg(model_dir: Path, inputs: Path, out: Path, **gen) -> WorldtuneConfig:
    base = dict(inputs=str(inputs), out=str(out), seeds=[5, 6], steps=STEPS, guidance=GUIDANCE, height=H, width=W,
                num_frames=F, mode="image2world")
    return WorldtuneConfig.model_validate({"model": {"path": str(model_dir)}, "generate": {**base, **gen}})


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("c3inputs")
    write_image(d / "cube.png", random_frames(1, H, W, seed=3)[0])
    (d / "cube.txt").write_text(PROMPT)
    return d


@pytest.fixture(scope="module")
def first_run(model_dir, inputs, adapter, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("c3gen") / "out"
    run(_cfg(model_dir, inputs, out, adapters=[{"path": str(adapter), "name": "lora_a"}]))
    return out


def test_run_with_an_adapter_equals_plain_diffusers_with_load_lora_adapter(first_run, model_dir, adapter, inputs,
                                                                         tmp_path):
    from diffusers import Cosmos3OmniPipeline

    rows = {(r["model"], r["seed"]): r for r in map(json.loads, (first_run / "generations.jsonl").read_text().splitlines())
            if not r["baseline"]}
    assert set(rows) == {(m, s) for m in ("base", "lora_a") for s in (5, 6)}
    r = rows[("lora_a", 5)]
    assert (r["sampler"], r["negative_prompt"], r["fps"], r["num_frames"]) == ("pipeline", None, FPS, F)

    pipe = Cosmos3OmniPipeline.from_pretrained(model_dir)
    pipe.set_progress_bar_config(disable=True)
    route_conv3d_to_onednn(pipe.vae)  # first_run generated with the VAE worldtune loads: the same kernels here
    pipe.transformer.load_lora_adapter(adapter, weight_name="pytorch_lora_weights.safetensors")
    direct = pipe(PROMPT, image=Image.open(inputs / "cube.png").convert("RGB"), num_frames=F, height=H, width=W,
                  fps=FPS, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                  generator=torch.Generator().manual_seed(5), output_type="np").video
    ref = read_frames(write_video(tmp_path / "direct.mp4", to_uint8(direct), fps=FPS)).astype(int)
    ours = read_frames(first_run / "lora_a/cube_s5.mp4").astype(int)
    base = read_frames(first_run / "base/cube_s5.mp4").astype(int)
    assert np.abs(ours - ref).max() <= 2  # the same frames up to a rounding flip through the codec
    assert np.abs(base - ref).mean() > 5 * max(np.abs(ours - ref).mean(), 0.1)  # the adapter matters


def test_resume_skips_finished_videos(first_run, model_dir, inputs, adapter):
    before = {p: p.stat().st_mtime_ns for p in first_run.rglob("*.mp4")}
    gone = first_run / "lora_a/cube_s6.mp4"
    gone.unlink()
    run(_cfg(model_dir, inputs, first_run, adapters=[{"path": str(adapter), "name": "lora_a"}]))
    after = {p: p.stat().st_mtime_ns for p in first_run.rglob("*.mp4")}
    assert len(after) == 5 and [p for p in after if after[p] != before.get(p)] == [gone]  # + first_frame/cube.mp4


def test_an_adapter_of_another_base_is_refused_before_any_video(model_dir, inputs, adapter, tmp_path):
    """The base-model facts export records (the family's adapter_info) are compared, not Predict config keys."""
    bad = Path(shutil.copytree(adapter, tmp_path / "deeper"))
    meta = json.loads((bad / "worldtune_adapter.json").read_text())
    (bad / "worldtune_adapter.json").write_text(json.dumps({**meta, "num_layers": meta["num_layers"] + 1}))
    out = tmp_path / "out"
    with pytest.raises(GenerationError, match="num_layers = 3 but the base model has 2"):
        run(_cfg(model_dir, inputs, out, adapters=[{"path": str(bad)}]))
    assert not list(out.rglob("*.mp4"))
