"""Cosmos 3 trained with actions from its start (what `worldtune seed seed-cosmos3` runs): `train.mode = "full"`
with the joint action task trains the generator pathway, the action tables whole and the action tokens' modality
embedding, and exports a plain diffusers transformer."""

from __future__ import annotations

import json

import pytest
import torch

from tests.train.conftest import train_cfg
from worldtune.data.actions import read_index
from worldtune.models.cosmos3 import Cosmos3
from worldtune.models.cosmos3_actions import INPUT_TABLES, OUTPUT_TABLES
from worldtune.train.checkpoint import CheckpointManager
from worldtune.train.schedule import ema_decay
from worldtune.train.trainer import Trainer


@pytest.mark.usefixtures("domain_tables")
def test_full_joint_training_moves_the_action_tables_and_exports_plain_weights(fd_data, tiny_cosmos3_dir, tmp_path):
    from diffusers import Cosmos3OmniTransformer

    cfg = train_cfg(tiny_cosmos3_dir, fd_data, tmp_path / "run", "--train.task", "joint", "--train.mode", "full",
                    "--train.steps", "30", "--train.lr", "3e-3", "--train.val_videos", "0", "--train.batch_size", "2",
                    "--train.cond_frames_probs", "{1 = 1.0}", "--train.ema", "0.999")
    trainer = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.transformer.named_parameters()}
    summary = trainer.fit()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5  # it learns
    exported = Cosmos3OmniTransformer.from_pretrained(summary["export"])  # no parametrization left in the files
    after = dict(exported.named_parameters())
    slot = read_index(fd_data)["domain"]["id"]
    for table in INPUT_TABLES + OUTPUT_TABLES:  # joint predicts actions too: both directions learn the robot's slot
        delta = (after[f"{table}.weight"] - before[f"{table}.weight"]).abs().amax(dim=-1)
        others = torch.cat([delta[:slot], delta[slot + 1:]])  # only weight decay moves the slots no data uses
        assert delta[slot] > 10 * others.max(), table
    generator = set(Cosmos3.generator_parameters(None, exported))
    assert all(not torch.equal(after[n], before[n]) for n in generator)  # the whole generator pathway trained
    # the action tokens' modality embedding starts at zero: left out, every action token would lack it for good
    assert not torch.equal(after["action_modality_embed"], before["action_modality_embed"])
    assert all(torch.equal(after[n], p) for n, p in before.items()  # the reasoner tower, as NVIDIA's recipe
               if n not in generator and not n.startswith(("action_proj_in", "action_proj_out", "action_modality")))

    # the exported EMA follows the training (warmed up): a fixed 0.999 would export ~97 % of the random start
    last = CheckpointManager.load(CheckpointManager(str(tmp_path / "run")).resolve("auto"))["trainable"]
    name = next(n for n in generator if n.endswith("weight") and "mlp" in n)
    trained, ema = last[name].float() - before[name], after[name].detach() - before[name]
    assert float((ema * trained).sum() / trained.pow(2).sum()) > 0.5


def test_ema_decay_warms_up_to_the_configured_value():
    assert ema_decay(0.999, 0) == pytest.approx(0.1)
    assert ema_decay(0.999, 600) == pytest.approx(601 / 610)
    assert ema_decay(0.999, 100_000) == 0.999
