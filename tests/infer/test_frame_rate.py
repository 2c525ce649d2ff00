"""Generated videos play at the clips' frame rate; Predict2 is conditioned on the fps it was
trained with; what a worldtune Predict2 video equals; the documented plain-diffusers snippet runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.infer.conftest import F, H, W, make_dataset
from worldtune.config import WorldtuneConfig
from worldtune.data.video import probe, read_frames, write_video
from worldtune.infer.generate import adapter_label, run, to_uint8

REPO = Path(__file__).resolve().parents[2]
CLIP_FPS = 7.5  # e.g. a 15 fps source prepared at stride 2


def _dataset_at(root: Path, fps: float) -> Path:
    """A prepared dataset whose clips (and info.json) run at `fps`."""
    ds = make_dataset(root, {"c0": "train", "c1": "val"}, num_frames=F)
    for clip in (ds / "clips").glob("*.mp4"):
        write_video(clip, read_frames(clip), fps=fps)
    info = json.loads((ds / "info.json").read_text())
    (ds / "info.json").write_text(json.dumps({**info, "fps": fps}))
    return ds


def _gen_cfg(model: Path, ds: Path, out: Path, **gen) -> WorldtuneConfig:
    return WorldtuneConfig.model_validate({"model": {"path": str(model)}, "generate": {
        "inputs": str(ds), "out": str(out), "seeds": [0], "steps": 1, "guidance": 7.0, **gen}})


def test_generated_videos_play_at_the_clips_frame_rate(tiny_model_dir, tmp_path, capsys):
    ds = _dataset_at(tmp_path / "ds", CLIP_FPS)
    out = run(_gen_cfg(tiny_model_dir, ds, tmp_path / "out", max_sequence_length=160))
    row = json.loads((out / "generations.jsonl").read_text().splitlines()[0])
    real = probe(out / row["ground_truth"]).fps
    assert real == CLIP_FPS
    assert probe(out / row["video"]).fps == real and row["fps"] == real
    assert all(probe(out / v).fps == real for v in row["views"].values())
    assert json.loads((out / "info.json").read_text())["fps"] == real
    assert f"{H}x{W}x{F} (HxWxF) @ 7.5 fps" in capsys.readouterr().out  # height first, as everywhere else


def test_default_adapter_label_is_the_run_name(tmp_path):
    export = tmp_path / "runs" / "lora_r32" / "export"
    export.mkdir(parents=True)
    (export / "pytorch_lora_weights.safetensors").write_bytes(b"")
    assert adapter_label(export) == "lora_r32"
    assert adapter_label(export / "pytorch_lora_weights.safetensors") == "lora_r32"
    assert adapter_label(tmp_path / "my adapter") == "my_adapter"


@pytest.fixture(scope="module")
def predict2_dir(tmp_path_factory) -> Path:
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-predict2", tmp_path_factory.mktemp("p2") / "model")


def test_predict2_generation_uses_the_training_fps_and_equals_the_documented_pipeline_call(
        predict2_dir, tmp_path, monkeypatch):
    from diffusers import Cosmos2VideoToWorldPipeline
    from diffusers.models.transformers.transformer_cosmos import CosmosRotaryPosEmbed
    from PIL import Image

    from tests.train.conftest import train_cfg
    from worldtune.infer.generate import initial_noise
    from worldtune.models.build import NoOpSafetyChecker
    from worldtune.train.trainer import Trainer

    seen: list = []  # the fps the DiT's rotary embedding (its only consumer) receives
    forward = CosmosRotaryPosEmbed.forward

    def spy(self, hidden_states, fps=None):
        seen.append(fps)
        return forward(self, hidden_states, fps=fps)

    monkeypatch.setattr(CosmosRotaryPosEmbed, "forward", spy)
    ds = _dataset_at(tmp_path / "ds", CLIP_FPS)
    trainer = Trainer(train_cfg(predict2_dir, ds, tmp_path / "run", "--train.cache", "none", "--train.steps", "1"))
    trainer.out.mkdir(parents=True)
    trainer.train_step()
    trained, seen[:] = set(seen), []
    out = run(_gen_cfg(predict2_dir, ds, tmp_path / "out"))
    generated, seen[:] = set(seen), []
    assert trained == generated == {CLIP_FPS}

    # docs/generate.md: a worldtune Predict2 video == the pipeline given `latents=` the seed's noise
    # and the same seeded generator; a plain call with only the generator starts from other noise
    row = json.loads((out / "generations.jsonl").read_text().splitlines()[0])
    pipe = Cosmos2VideoToWorldPipeline.from_pretrained(predict2_dir, safety_checker=NoOpSafetyChecker())
    pipe.set_progress_bar_config(disable=True)
    kw = dict(image=Image.fromarray(read_frames(ds / "clips" / "c1.mp4")[0]), prompt=row["prompt"], height=H,
              width=W, num_frames=F, num_inference_steps=1, guidance_scale=7.0, fps=CLIP_FPS, output_type="np",
              max_sequence_length=128)
    shape = (1, 16, (F - 1) // 4 + 1, H // 8, W // 8)
    documented = pipe(latents=initial_noise(0, shape), generator=torch.Generator().manual_seed(0), **kw).frames[0]
    plain = pipe(generator=torch.Generator().manual_seed(0), **kw).frames[0]
    ours = read_frames(out / row["video"]).astype(int)
    ref = read_frames(write_video(tmp_path / "documented.mp4", to_uint8(documented), fps=CLIP_FPS)).astype(int)
    assert np.abs(ours - ref).max() <= 2  # the same frames, up to a rounding flip through the codec
    assert np.abs(to_uint8(plain).astype(int) - to_uint8(documented).astype(int)).mean() > 1.0


def test_documented_diffusers_snippet_runs(tiny_model_dir, adapter_dir, tmp_path, monkeypatch):
    """The snippet of docs/generate.md, with this machine's paths and sizes, loads an exported adapter."""
    from PIL import Image

    text = (REPO / "docs" / "generate.md").read_text()
    code = text.split("## Using an exported adapter in plain diffusers")[1].split("```python")[1].split("```")[0]
    Image.fromarray(np.full((H, W, 3), 90, np.uint8)).save(tmp_path / "first.png")
    values = {"MODEL": repr(str(tiny_model_dir)), "ADAPTER": repr(str(adapter_dir)),
              "IMAGE": repr(str(tmp_path / "first.png")), "HEIGHT, WIDTH, FRAMES, STEPS, FPS": f"{H}, {W}, {F}, 2, 16",
              "DEVICE, DTYPE": '"cpu", torch.float32'}
    for name, value in values.items():
        code, n = re.subn(rf"^{re.escape(name)} = .*$", f"{name} = {value}", code, flags=re.M)
        assert n == 1, name
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "docs/generate.md", "exec"), scope)
    assert probe(tmp_path / "generated.mp4").num_frames == F
    assert scope["pipe"].transformer.peft_config  # the adapter is loaded
