"""Inverse-dynamics (and joint) post-training of tiny-cosmos3 on the demo robot's 4-D actions in a new domain slot:
the held-out action loss falls, only the adapter and the domain's input and output rows move, resume is exact,
the exported rows reach the cosmos3 labeller's `inverse_dynamics` call, bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.train.conftest import FD, train_cfg
from worldtune.config import load_config
from worldtune.errors import CheckpointError, ConfigError, GenerationError
from worldtune.models.cosmos3_actions import INPUT_TABLES, OUTPUT_TABLES, ROWS_FILE
from worldtune.train.checkpoint import CheckpointManager
from worldtune.train.trainer import Trainer

ID = ("--train.task", "inverse_dynamics")
TABLES = INPUT_TABLES + OUTPUT_TABLES


def id_cfg(model_dir, data, out, *extra, task=ID):
    return train_cfg(model_dir, data, out, *task, "--train.val_videos", "0", "--train.checkpoint.every", "0", *extra)


def _tables(transformer) -> dict[str, torch.Tensor]:
    return {n: transformer.get_submodule(n).weight.detach().clone() for n in TABLES}


def _only_the_domain_rows_moved(before: dict[str, torch.Tensor], transformer, slot: int) -> None:
    for name, old in before.items():
        new = transformer.get_submodule(name).weight
        others = torch.arange(len(old)) != slot
        assert torch.equal(new[others], old[others]) and not torch.equal(new[slot], old[slot]), name


@pytest.fixture(scope="module")
def id_run(fd_data, tiny_cosmos3_dir, tmp_path_factory):
    """30 inverse-dynamics steps at lr 1e-2 from the shared action cache, with what the model held before."""
    cfg = id_cfg(tiny_cosmos3_dir, fd_data, tmp_path_factory.mktemp("id") / "run", "--train.steps", "30",
                 "--train.lr", "1e-2", "--train.warmup", "5", "--train.log_every", "10")
    trainer = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.transformer.named_parameters()}
    tables, start = _tables(trainer.transformer), trainer.validate()
    return {"trainer": trainer, "before": before, "tables": tables, "start": start, "summary": trainer.fit()}


@pytest.mark.usefixtures("one_thread", "domain_tables")
def test_action_loss_falls_and_only_the_adapter_and_both_domain_rows_move(id_run, fd_data, tiny_cosmos3_dir, tmp_path):
    from diffusers import Cosmos3OmniTransformer
    from safetensors.torch import load_file

    from worldtune.models.cosmos3_actions import load_action_adapter_rows, read_action_info

    trainer, summary = id_run["trainer"], id_run["summary"]
    assert trainer.setup.modes == ("inverse_dynamics",) and trainer.objective.shift == 3.0  # the 256 tier's canvas
    domain = trainer.setup.domain
    assert (domain.id, domain.width, domain.new) == (31, 4, True)
    # Measured (2-core CPU): the held-out action loss at fixed noise 36.29 -> 5.34 after 30 steps (-85 %), from the
    # untrained slot's rows; the threshold keeps a wide margin. At lr 1e-9 it stays at 1.0000 of the start.
    start = id_run["start"]["val_loss"]
    assert summary["val_loss"] < 0.5 * start, (start, summary["val_loss"])
    assert summary["val_videos"] == 0  # inverse dynamics generates no video
    flat = Trainer(id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "flat", "--train.steps", "30", "--train.lr", "1e-9",
                          "--train.warmup", "5", "--train.log_every", "30")).fit()
    assert abs(flat["val_loss"] / start - 1) < 1e-4, (start, flat["val_loss"])

    changed = {n for n, p in trainer.transformer.named_parameters() if not torch.equal(p, id_run["before"][n])}
    assert changed and all("lora_" in n or n.endswith("parametrizations.weight.0.row") for n in changed)
    assert {n.split(".parametrizations")[0] for n in changed if n.endswith(".row")} == set(TABLES)
    _only_the_domain_rows_moved(id_run["tables"], trainer.transformer, domain.id)

    export = Path(summary["export"])
    info = read_action_info(export)
    assert info["task"] == "inverse_dynamics" and info["domain"] == domain.to_dict()
    assert set(load_file(export / ROWS_FILE)) == {f"{n}.weight" for n in TABLES}
    fresh = Cosmos3OmniTransformer.from_pretrained(tiny_cosmos3_dir, subfolder="transformer")
    assert load_action_adapter_rows(fresh, export) == domain  # input and output rows, other slots untouched
    for name, old in id_run["tables"].items():
        new, trained = fresh.get_submodule(name).weight, trainer.transformer.get_submodule(name).weight
        others = torch.arange(len(old)) != domain.id
        assert torch.equal(new[others], old[others]) and torch.equal(new[domain.id], trained[domain.id].detach())


def test_resume_is_exact_with_the_output_rows_and_exports_hold_them(fd_data, tiny_cosmos3_dir, tmp_path):
    from diffusers import Cosmos3OmniTransformer
    from safetensors.torch import load_file

    from worldtune.train.export import run as export_run

    extra = ("--train.steps", "4", "--train.checkpoint.every", "2", "--train.lr", "1e-2")
    Trainer(id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "a", *extra)).fit()
    part = Trainer(id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "b", *extra))
    part.out.mkdir(parents=True)
    for _ in range(2):
        part.train_step()
    part.save()
    del part
    Trainer(id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "b", *extra, "--train.resume", "auto")).fit()
    a = CheckpointManager.load(tmp_path / "a" / "checkpoints" / "step-00000004")
    b = CheckpointManager.load(tmp_path / "b" / "checkpoints" / "step-00000004")
    assert a["trainable"].keys() == b["trainable"].keys()
    assert sum(k.startswith("action_proj_out") and k.endswith(".row") for k in a["trainable"]) == 2
    assert all(torch.equal(a["trainable"][k], b["trainable"][k]) for k in a["trainable"])
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and len(sa) == len(a["trainable"])
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])

    ckpt = str(tmp_path / "b" / "checkpoints" / "step-00000004")
    export_run(ckpt, str(tmp_path / "exp"))
    ours, run_export = load_file(tmp_path / "exp" / ROWS_FILE), load_file(tmp_path / "b" / "export" / ROWS_FILE)
    assert ours.keys() == run_export.keys() == {f"{n}.weight" for n in TABLES}
    assert all(torch.equal(ours[k], run_export[k]) for k in ours)
    # the fused export writes both projections' rows into a plain diffusers transformer
    export_run(ckpt, str(tmp_path / "fused"), fuse=True)
    fused = Cosmos3OmniTransformer.from_pretrained(tmp_path / "fused" / "transformer")
    base = Cosmos3OmniTransformer.from_pretrained(tiny_cosmos3_dir, subfolder="transformer")
    for name in TABLES:
        new, old = fused.get_submodule(name).weight, base.get_submodule(name).weight
        assert torch.equal(new[31:32], ours[f"{name}.weight"]) and torch.equal(new[:31], old[:31]), name


def test_mode_weights_set_how_often_joint_draws_each_mode():
    """`train.dynamics.mode_weights` weighs the joint task's draw (a zero weight is never drawn); without it the
    draw is the uniform one, sample for sample, so runs made before the option resume unchanged."""
    from worldtune.train.action_flow import draw_modes

    modes, seeds = ("forward_dynamics", "inverse_dynamics", "policy"), list(range(3000))
    cfg = load_config(None, ["--train.dynamics.mode_weights", "{forward_dynamics = 4, inverse_dynamics = 1}"])
    drawn = draw_modes(modes, seeds, cfg.train.dynamics.mode_weights)
    assert 0.76 < drawn.count("forward_dynamics") / len(seeds) < 0.84 and "policy" not in drawn
    assert drawn == draw_modes(modes, seeds, {"forward_dynamics": 8, "inverse_dynamics": 2})  # relative, by seed
    assert draw_modes(modes, seeds, {}) == draw_modes(modes, seeds)
    with pytest.raises(ConfigError):
        load_config(None, ["--train.dynamics.mode_weights", "{forward = 1}"])


@pytest.mark.usefixtures("one_thread", "domain_tables")
def test_joint_trains_every_mode_and_both_heads(fd_data, tiny_cosmos3_dir, tmp_path):
    from worldtune.train.action_flow import draw_modes

    drawn = draw_modes(("forward_dynamics", "inverse_dynamics", "policy"), list(range(300)))
    counts = {m: drawn.count(m) for m in set(drawn)}
    assert len(counts) == 3 and min(counts.values()) > 70, counts  # uniform over the three modes
    assert drawn == draw_modes(("forward_dynamics", "inverse_dynamics", "policy"), list(range(300)))  # by seed
    trainer = Trainer(id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "joint", "--train.steps", "30", "--train.lr", "1e-2",
                             "--train.warmup", "5", "--train.log_every", "30", task=("--train.task", "joint")))
    tables, start = _tables(trainer.transformer), trainer.validate()
    # Measured (2-core CPU), 30 steps: inverse dynamics 36.3 -> 6.6, policy 37.6 -> 7.9, forward dynamics 1.357 ->
    # 1.28 (its video loss moves slowly at this lr, as in the forward-dynamics test).
    end = trainer.fit()
    assert set(start) >= {f"val_loss_{m}" for m in ("forward_dynamics", "inverse_dynamics", "policy")}
    assert end["val_loss_inverse_dynamics"] < 0.5 * start["val_loss_inverse_dynamics"]
    assert end["val_loss_policy"] < 0.5 * start["val_loss_policy"]
    assert end["val_loss_forward_dynamics"] < start["val_loss_forward_dynamics"]
    _only_the_domain_rows_moved(tables, trainer.transformer, trainer.setup.domain.id)
    assert json.loads((Path(end["export"]) / "worldtune_adapter.json").read_text())["action"]["task"] == "joint"


@pytest.mark.usefixtures("one_thread", "domain_tables")
@pytest.mark.usefixtures("reference_conv3d")
def test_trained_rows_reach_the_cosmos3_labellers_inverse_dynamics(id_run, fd_data, tiny_cosmos3_dir):
    """The labeller with the exported adapter labels a held-out clip exactly as a plain pipeline call does with the
    LoRA and both rows loaded by hand, and unlike the same call with the slot's untrained rows; without such an
    adapter it says that a new robot's labels mean nothing."""
    import pyarrow.parquet as pq
    from diffusers import Cosmos3OmniPipeline, CosmosActionCondition
    from PIL import Image
    from safetensors.torch import load_file

    from worldtune.data.actions import denormalize
    from worldtune.data.dataset import read_clip_frames
    from worldtune.idm.cosmos3 import load_cosmos3_labeler
    from worldtune.models.cosmos3_actions import read_action_info

    export = Path(id_run["summary"]["export"])
    info = read_action_info(export)
    fps = float(info["fps"])
    row = next(r for r in pq.read_table(fd_data / "manifest.parquet").to_pylist() if r["split"] == "val")
    frames = read_clip_frames(fd_data, row)
    labeller_args = ["--model.path", str(tiny_cosmos3_dir), "--trajectories.cosmos3.dataset", str(fd_data),
                     "--trajectories.cosmos3.steps", "2", "--trajectories.device", "cpu"]
    labeller = load_cosmos3_labeler(load_config(None, [*labeller_args, "--trajectories.cosmos3.adapter", str(export)]),
                                    None, fps)
    assert (labeller.output_rows, labeller.note) == ("adapter", None)
    labels = labeller.label_video(frames, row["task"])

    pipe = Cosmos3OmniPipeline.from_pretrained(tiny_cosmos3_dir)
    pipe.set_progress_bar_config(disable=True)
    pipe.transformer.load_lora_adapter(str(export), weight_name="pytorch_lora_weights.safetensors")
    from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as p

    name, slot = info["domain"]["name"], info["domain"]["id"]
    p._EMBODIMENT_TO_DOMAIN_ID[name], p._EMBODIMENT_TO_RAW_ACTION_DIM[name] = slot, info["width"]

    def label() -> np.ndarray:
        out = pipe(row["task"], action=CosmosActionCondition(
            mode="inverse_dynamics", chunk_size=info["chunk_size"], domain_name=name, resolution_tier=info["tier"],
            video=[Image.fromarray(f) for f in frames], view_point=info["view_point"]),
            fps=fps, num_inference_steps=2, guidance_scale=1.0, generator=torch.Generator("cpu").manual_seed(0),
            output_type="latent")
        return np.asarray(denormalize(out.action[0].double().numpy(), info["stats"], info["normalization"]), np.float32)

    untrained = label()
    with torch.no_grad():
        for key, value in load_file(export / ROWS_FILE).items():
            pipe.transformer.get_submodule(key.removesuffix(".weight")).weight[slot] = value[0]
    by_hand = label()
    np.testing.assert_array_equal(labels[:-1], by_hand)
    assert not np.allclose(by_hand, untrained, atol=1e-3)

    base = load_cosmos3_labeler(load_config(None, labeller_args), None, fps)
    assert base.output_rows == "checkpoint" and "inverse_dynamics" in base.note and name in base.note


@pytest.mark.usefixtures("domain_tables")
def test_bad_inputs_are_one_line_errors(id_run, fd_data, tiny_cosmos3_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    from worldtune.models.cosmos3_actions import load_action_adapter_rows
    from worldtune.serve.world import _adapter_actions

    with pytest.raises(ConfigError, match="unset train.fsdp"):
        id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "r1", "--train.fsdp", "true")
    with pytest.raises(ConfigError, match="fixes the clean frames"):
        id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "r2", "--train.cond_frames_probs", "{0 = 0.5, 1 = 0.5}")
    # a forward-dynamics run cannot continue as inverse dynamics
    Trainer(id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "fd", "--train.steps", "1", task=FD)).fit()
    with pytest.raises(CheckpointError, match="forward_dynamics checkpoint"):
        Trainer(id_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "fd", "--train.steps", "2", "--train.resume", "auto")).fit()
    # an adapter that only learned inverse dynamics is not served as a forward-dynamics world model
    export = Path(id_run["summary"]["export"])
    with pytest.raises(ConfigError, match="does not train forward_dynamics"):
        _adapter_actions(None, str(export))
    # a rows file whose output row does not fit the model
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for f in export.iterdir():
        (damaged / f.name).write_bytes(f.read_bytes())
    rows = load_file(export / ROWS_FILE)
    save_file({**rows, "action_proj_out.bias.weight": torch.zeros(1, 3)}, str(damaged / ROWS_FILE))
    from diffusers import Cosmos3OmniTransformer

    fresh = Cosmos3OmniTransformer.from_pretrained(tiny_cosmos3_dir, subfolder="transformer")
    with pytest.raises(GenerationError, match=r"action_proj_out.bias.weight.*\[1, 3\].*adapter trained on this base"):
        load_action_adapter_rows(fresh, damaged)
