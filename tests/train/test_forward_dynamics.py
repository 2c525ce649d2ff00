"""Forward-dynamics post-training of tiny-cosmos3 on the demo robot's actions: the cache holds what the pipeline
conditions on, the loss falls, only the adapter and the domain's rows move, resume is exact, bad input is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.train.conftest import FAILED_EPISODE, FD, train_cfg
from worldtune.data import actions as A
from worldtune.errors import ConfigError, DatasetError
from worldtune.models.cosmos3_actions import INPUT_TABLES, ROWS_FILE
from worldtune.train.checkpoint import CheckpointManager
from worldtune.train.trainer import Trainer


def fd_cfg(model_dir, data, out, *extra):
    return train_cfg(model_dir, data, out, *FD, "--train.val_videos", "0", *extra)


def _rows(data):
    import pyarrow.parquet as pq

    return pq.read_table(data / "manifest.parquet").to_pylist()


@pytest.mark.usefixtures("domain_tables")
def test_cache_holds_what_the_pipeline_conditions_on(fd_data, tiny_cosmos3_dir):
    """Latents of the tier's canvas cropped back (frame 0 bit-equal to a plain forward_dynamics pipeline run's
    conditioning latent, unlike the clip encoded as it is), the normalised chunk, the action caption's ids;
    the failed episode is kept."""
    from diffusers import Cosmos3OmniPipeline, CosmosActionCondition
    from PIL import Image

    from worldtune.data.cache import LatentCache
    from worldtune.data.dataset import read_clip_frames
    from worldtune.models.cosmos3_actions import action_prompt_token_ids, register_domain
    from worldtune.models.cosmos3_domains import ActionDomain
    from worldtune.models.cpu_conv3d import route_conv3d_to_onednn
    from worldtune.models.latents import encode, frames_to_pixels

    (cache_dir,) = (fd_data / "cache").iterdir()
    cache = LatentCache(cache_dir)
    assert (cache.info["task"], cache.info["tier"], cache.info["canvas"]) == ("forward_dynamics", 256, [192, 320])
    assert cache.info["view_point"] == "concat_view"  # a grid of three cameras
    rows = _rows(fd_data)
    assert FAILED_EPISODE in {r["episode_index"] for r in rows if r["split"] == "train"}
    assert cache.clip_ids == cache.action_ids == {r["clip_id"] for r in rows}
    index = A.read_index(fd_data)
    row = next(r for r in rows if r["episode_index"] == FAILED_EPISODE)
    chunk = A.clip_chunk(A.load_clip(fd_data, row["clip_id"])["action"], 2)
    assert chunk.shape == (4, 4) and index["normalization"] == "quantile"
    assert torch.equal(cache.actions(row["clip_id"]), torch.from_numpy(A.normalize(chunk, index["stats"]["action"],
                                                                                    "quantile")))
    # the convolution kernels the cache was encoded with (tests/models/test_cpu_conv3d.py compares them with PyTorch's)
    pipe = Cosmos3OmniPipeline.from_pretrained(tiny_cosmos3_dir)
    route_conv3d_to_onednn(pipe.vae)
    fps = float(json.loads((fd_data / "info.json").read_text())["fps"])
    ids, empty = action_prompt_token_ids(pipe, row["task"], 4, 192, 320, fps, "concat_view")
    cached = cache.text(row["task"])
    assert cached[0][cached[0] >= 0].tolist() == ids and cached[1][cached[1] >= 0].tolist() == empty

    frames = read_clip_frames(fd_data, row)
    register_domain(ActionDomain(**index["domain"]))
    calls = []
    hook = pipe.transformer.register_forward_hook(lambda m, a, kw, out: calls.append(kw), with_kwargs=True)
    try:
        pipe(row["task"], action=CosmosActionCondition(
            mode="forward_dynamics", chunk_size=4, domain_name=index["domain"]["name"], resolution_tier=256,
            raw_actions=torch.from_numpy(chunk), image=Image.fromarray(frames[0]), view_point="concat_view"),
            fps=fps, num_inference_steps=1, guidance_scale=1.0, output_type="latent")
    finally:
        hook.remove()
    latents = cache.latents(row["clip_id"])
    assert latents.shape == (48, 2, 2, 4)  # 32x64 content of the 192x320 canvas
    assert torch.equal(calls[0]["vision_tokens"][0][0, :, 0], latents[:, 0])
    assert calls[0]["input_ids"].tolist() == ids
    plain = encode(pipe.vae, frames_to_pixels(frames)[None])[0]
    assert not torch.allclose(plain[:, 0], latents[:, 0], atol=1e-3)  # the canvas padding reaches the latents


@pytest.mark.usefixtures("one_thread", "domain_tables")
def test_loss_falls_and_only_the_adapter_and_the_domain_row_move(fd_data, tiny_cosmos3_dir, tmp_path):
    from worldtune.models.cosmos3_actions import load_action_adapter_rows, read_action_info

    # Measured (2-core CPU): held-out loss at fixed noise 1.357 -> 1.145 after 60 steps at lr 1e-2 (-16 %); the
    # threshold keeps half of that margin. At lr 1e-9 it stays at 1.0000 of the start.
    cfg = fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "run", "--train.steps", "60", "--train.lr", "1e-2",
                 "--train.warmup", "5", "--train.log_every", "20", "--train.checkpoint.every", "0",
                 "--train.val_videos", "1", "--train.val_steps", "4")
    trainer = Trainer(cfg)
    assert trainer.objective.cond_frames_probs == ((1, 1.0),) and trainer.objective.shift == 3.0  # 256 tier
    domain = trainer.setup.domain
    assert (domain.id, domain.width, domain.new) == (31, 4, True)
    tables = {n: trainer.transformer.get_submodule(n).weight.detach().clone() for n in INPUT_TABLES}
    before = {n: p.detach().clone() for n, p in trainer.transformer.named_parameters()}
    start = trainer.validate()["val_loss"]
    summary = trainer.fit()
    assert summary["val_loss"] < 0.92 * start, (start, summary["val_loss"])
    assert summary["val_videos"] == 1  # sampled from the held-out clip's first frame and its actions
    changed = {n for n, p in trainer.transformer.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n or n.endswith("parametrizations.weight.0.row") for n in changed)
    assert sum(n.endswith(".row") for n in changed) == 2  # the input projection's weight and bias rows
    for name, old in tables.items():
        new = trainer.transformer.get_submodule(name).weight
        others = torch.arange(len(old)) != domain.id
        assert torch.equal(new[others], old[others]) and not torch.equal(new[domain.id], old[domain.id])

    export = Path(summary["export"])
    info = read_action_info(export)
    index = A.read_index(fd_data)
    assert info["domain"] == index["domain"] and info["stats"] == index["stats"]["action"]
    assert (info["normalization"], info["chunk_size"], info["tier"], info["canvas"]) == ("quantile", 4, 256, [192, 320])
    from diffusers import Cosmos3OmniTransformer
    from safetensors.torch import load_file

    rows = load_file(export / ROWS_FILE)
    assert set(rows) == {f"{n}.weight" for n in INPUT_TABLES}
    fresh = Cosmos3OmniTransformer.from_pretrained(tiny_cosmos3_dir, subfolder="transformer")
    assert load_action_adapter_rows(fresh, export) == domain
    for name, old in tables.items():
        new = fresh.get_submodule(name).weight
        others = torch.arange(len(old)) != domain.id
        assert torch.equal(new[others], old[others])
        assert torch.equal(new[domain.id], trainer.transformer.get_submodule(name).weight[domain.id].detach())


@pytest.mark.usefixtures("domain_tables")
def test_full_mode_trains_the_generator_and_the_input_tables(fd_data, tiny_cosmos3_dir, tmp_path):
    """`train.mode = "full"` with forward dynamics is accepted (docs/cosmos3.md lists what it refuses): the generator
    pathway, the input action tables whole and the action modality embedding train; the output tables (no action is
    predicted) and the reasoner stay; the export is a plain diffusers transformer."""
    from diffusers import Cosmos3OmniTransformer

    from worldtune.models.cosmos3 import Cosmos3
    from worldtune.models.cosmos3_actions import OUTPUT_TABLES

    refusals = (Path(__file__).parents[2] / "docs" / "cosmos3.md").read_text().split("**Refused in one line:**")[1]
    refusals = refusals.split("\n\n")[0]
    assert "train.fsdp" in refusals and 'train.mode = "full"' not in refusals, refusals
    cfg = fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "run", "--train.mode", "full", "--train.steps", "2",
                 "--train.lr", "1e-2", "--train.checkpoint.every", "0")
    trainer = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.transformer.named_parameters()}
    summary = trainer.fit()
    export = Path(summary["export"])
    assert export.name == "transformer" and not (export.parent / ROWS_FILE).exists()
    after = dict(Cosmos3OmniTransformer.from_pretrained(export).named_parameters())
    generator = set(Cosmos3.generator_parameters(None, trainer.transformer))
    assert all(not torch.equal(after[n], before[n]) for n in generator)
    slot = trainer.setup.domain.id
    for table in INPUT_TABLES:
        assert not torch.equal(after[f"{table}.weight"][slot], before[f"{table}.weight"][slot]), table
    for table in OUTPUT_TABLES:
        assert torch.equal(after[f"{table}.weight"], before[f"{table}.weight"]), table
    assert not torch.equal(after["action_modality_embed"], before["action_modality_embed"])
    assert all(torch.equal(after[n], p) for n, p in before.items()
               if n not in generator and not n.startswith(("action_proj_in", "action_proj_out", "action_modality")))


def test_resume_is_exact_with_the_domain_rows(fd_data, tiny_cosmos3_dir, tmp_path):
    from worldtune.train.export import run as export_run

    extra = ("--train.steps", "4", "--train.checkpoint.every", "2", "--train.lr", "1e-2")
    Trainer(fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "a", *extra)).fit()
    part = Trainer(fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "b", *extra))
    part.out.mkdir(parents=True)
    for _ in range(2):
        part.train_step()
    part.save()
    del part
    Trainer(fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "b", *extra, "--train.resume", "auto")).fit()
    a = CheckpointManager.load(tmp_path / "a" / "checkpoints" / "step-00000004")
    b = CheckpointManager.load(tmp_path / "b" / "checkpoints" / "step-00000004")
    assert a["trainable"].keys() == b["trainable"].keys()
    assert sum(k.endswith(".row") for k in a["trainable"]) == 2
    assert all(torch.equal(a["trainable"][k], b["trainable"][k]) for k in a["trainable"])
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and len(sa) == len(a["trainable"])
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])
    # `worldtune export` of the checkpoint writes the same adapter rows the run exported
    from safetensors.torch import load_file

    export_run(str(tmp_path / "b" / "checkpoints" / "step-00000004"), str(tmp_path / "exp"))
    ours, run_export = load_file(tmp_path / "exp" / ROWS_FILE), load_file(tmp_path / "b" / "export" / ROWS_FILE)
    assert ours.keys() == run_export.keys() and all(torch.equal(ours[k], run_export[k]) for k in ours)
    assert json.loads((tmp_path / "exp" / "worldtune_adapter.json").read_text())["action"]["domain"]["id"] == 31


def test_decoded_training_sees_what_the_cache_holds(fd_data, tiny_cosmos3_dir, tmp_path):
    cached = Trainer(fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "c", "--train.steps", "1"))
    decoded = Trainer(fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "d", "--train.steps", "1", "--train.cache", "none"))
    assert cached.cache_mode and not decoded.cache_mode
    i = next(k for k, r in enumerate(decoded.train_set.rows) if r["clip_id"] == cached.train_set.rows[0]["clip_id"])
    x0, text, actions = cached._inputs([cached.train_set[0]])
    y0, text2, actions2 = decoded._inputs([decoded.train_set.get(i)])
    assert torch.equal(x0, y0) and torch.equal(actions, actions2)
    assert torch.equal(text[text >= 0], text2[text2 >= 0])
    assert np.isfinite(decoded.train_step()["loss"])


def test_bad_inputs_are_one_line_errors(fd_data, tiny_cosmos3_dir, tiny_model_dir, tmp_path):
    no_actions = Path(shutil.copytree(fd_data, tmp_path / "plain", ignore=shutil.ignore_patterns("cache")))
    (no_actions / A.INDEX).unlink()
    with pytest.raises(DatasetError, match="prepared without actions"):
        Trainer(fd_cfg(tiny_cosmos3_dir, no_actions, tmp_path / "r1"))
    with pytest.raises(ConfigError, match="needs a Cosmos 3 model"):
        Trainer(fd_cfg(tiny_model_dir, fd_data, tmp_path / "r2"))
    headless = Path(shutil.copytree(tiny_cosmos3_dir, tmp_path / "headless"))
    conf = headless / "transformer" / "config.json"
    conf.write_text(json.dumps({**json.loads(conf.read_text()), "action_gen": False}))
    with pytest.raises(ConfigError, match="without action heads"):
        Trainer(fd_cfg(headless, fd_data, tmp_path / "r3"))
    with pytest.raises(ConfigError, match="exactly the first latent frame"):
        fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "r4", "--train.cond_frames_probs", "{0 = 0.5, 1 = 0.5}")
    with pytest.raises(ConfigError, match="unset train.fsdp"):
        fd_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "r5", "--train.fsdp", "true")
