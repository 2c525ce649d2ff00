"""Training, export and generation facing damaged checkpoints, crafted files and changed settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.train.conftest import train_cfg
from worldtune.config import WorldtuneConfig, load_config
from worldtune.errors import CheckpointError, ConfigError, DatasetError
from worldtune.train.checkpoint import CheckpointManager, _rng_to_tensors, rng_state
from worldtune.train.trainer import Trainer


def _loss_steps(run: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]


@pytest.fixture(scope="module")
def run2(tiny_model_dir, cached_dataset, tmp_path_factory) -> Path:
    """A LoRA run of 2 steps with a checkpoint after each."""
    out = tmp_path_factory.mktemp("runs") / "run2"
    Trainer(train_cfg(tiny_model_dir, cached_dataset, out, "--train.steps", "2", "--train.checkpoint.every", "1",
                      "--train.val_every", "0", "--train.val_samples", "0")).fit()
    return out


def _resume(tiny_model_dir, cached_dataset, run: Path, *extra: str) -> dict:
    return Trainer(train_cfg(tiny_model_dir, cached_dataset, run, "--train.steps", "3", "--train.checkpoint.every",
                             "1", "--train.val_every", "0", "--train.val_samples", "0", "--train.resume", "auto",
                             *extra)).fit()


@pytest.mark.parametrize("damage", ["killed_before_checkpoint", "complete_without_weights", "cut_state_json"])
def test_damaged_newest_checkpoint_falls_back_and_metrics_do_not_repeat(damage, run2, tiny_model_dir,
                                                                        cached_dataset, tmp_path):
    run = Path(shutil.copytree(run2, tmp_path / "run"))
    newest = run / "checkpoints" / "step-00000002"
    if damage == "killed_before_checkpoint":  # step 2 was logged, then the run died before its checkpoint
        shutil.rmtree(newest)
    elif damage == "complete_without_weights":  # what a kill during the old same-step re-save left
        (newest / "trainable.safetensors").unlink()
    else:
        text = (newest / "state.json").read_text()
        (newest / "state.json").write_text(text[: len(text) // 2])
    summary = _resume(tiny_model_dir, cached_dataset, run)
    assert summary["steps"] == 3
    assert _loss_steps(run) == [1, 2, 3]  # step 2 was redone from step 1's checkpoint and logged once
    ck = CheckpointManager.load(run / "checkpoints" / "step-00000003")
    assert ck["state"]["step"] == 3 and len(ck["trainable"]) > 0


def test_kill_between_the_renames_of_a_same_step_resave_keeps_a_whole_checkpoint(tmp_path):
    m = CheckpointManager(tmp_path)
    m.save(1, {"w": torch.ones(2)}, {"state": {}, "param_groups": []}, {})

    def killed(where):
        if where == "aside":
            raise KeyboardInterrupt  # a kill runs no cleanup
    m.fail_hook = killed
    with pytest.raises(KeyboardInterrupt):
        m.save(1, {"w": torch.full((2,), 2.0)}, {"state": {}, "param_groups": []}, {})
    (source,) = m.candidates("auto")
    assert torch.equal(CheckpointManager.load(source)["trainable"]["w"], torch.ones(2))


@pytest.mark.parametrize("change", [("--train.lora.alpha", "64"), ("--train.lora.rank", "8")], ids=["alpha", "rank"])
def test_resume_with_other_lora_settings_is_a_one_line_error(change, run2, tiny_model_dir, cached_dataset, tmp_path):
    run = Path(shutil.copytree(run2, tmp_path / "run"))
    with pytest.raises(CheckpointError, match=f"other adapter settings .*{change[0].split('.')[-1]}"):
        _resume(tiny_model_dir, cached_dataset, run, *change)


def test_projected_text_cache_of_another_transformer_is_refused(tiny_model_dir, cached_dataset, tmp_path):
    from safetensors.torch import load_file, save_file

    other = Path(shutil.copytree(tiny_model_dir, tmp_path / "other"))
    weights = other / "transformer" / "diffusion_pytorch_model.safetensors"
    state = load_file(str(weights))
    proj = [k for k in state if k.startswith("crossattn_proj")]
    assert proj
    for k in proj:
        state[k] = state[k] * 1.5  # same VAE, same text encoder, another transformer projection
    save_file(state, str(weights))
    projected = next(d for d in (cached_dataset / "cache").iterdir()
                     if json.loads((d / "info.json").read_text())["text_kind"] == "projected")
    with pytest.raises(DatasetError, match="was made with model_id"):
        Trainer(train_cfg(other, cached_dataset, tmp_path / "r", "--train.cache", str(projected)))


def test_negative_learning_rate_is_a_config_error():
    with pytest.raises(ConfigError, match="train.lr must be"):
        load_config(None, ["--train.lr", "-0.001"])


def _crafted_dcp_checkpoint(root: Path, marker: Path) -> Path:
    """A checkpoint folder whose sharded-metadata file is a pickle that would create `marker`."""
    import pickle

    class Payload:
        def __reduce__(self):
            return open, (str(marker), "w")

    ck = root / "checkpoints" / "step-00000001"
    (ck / "dcp").mkdir(parents=True)
    (ck / "dcp" / ".metadata").write_bytes(pickle.dumps(Payload()))
    (ck / "state.json").write_text(json.dumps({"step": 1, "config": json.loads(WorldtuneConfig().model_dump_json())}))
    torch.save(_rng_to_tensors(rng_state()), ck / "rng.pt")
    (ck / "COMPLETE").write_text("ok\n")
    return ck


def test_export_of_a_crafted_sharded_checkpoint_runs_no_code(tmp_path):
    from worldtune.train.export import run as export

    marker = tmp_path / "code_ran"
    ck = _crafted_dcp_checkpoint(tmp_path / "run", marker)
    with pytest.raises(CheckpointError, match="refusing to load it"):
        export(str(ck), str(tmp_path / "out"))
    assert not marker.exists()
