"""Multi-view training end to end on the CPU: demo LeRobot set -> separate-views clips -> per-view cache ->
60 LoRA steps of the 3-view tiny model, which must lower the held-out loss at fixed noise."""

from __future__ import annotations

import json

import pytest
import torch

from worldtune.config import CacheConfig, LoraConfig, ModelConfig, PrepareConfig, WorldtuneConfig
from worldtune.data.cache import LatentCache
from worldtune.data.dataset import read_dataset
from worldtune.data.multiview_cache import MultiViewCachedClips, dataset_roles, run as cache_views, view_key
from worldtune.errors import DatasetError
from worldtune.models.load import load_transformer
from worldtune.models.multiview import MultiViewTransformer, multiview_flow_batch
from worldtune.train.adapters import apply_training_mode
from worldtune.train.flow import FlowMatchingLoss, transformer_inputs

ROLES = ["exterior_1", "exterior_2", "wrist"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls run fastest on one thread; on a shared 2-core box more threads only contend."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def separate_dataset(tmp_path_factory):
    from worldtune.data.prepare import run as prepare
    from worldtune.data.synthetic import write_demo_dataset

    root = tmp_path_factory.mktemp("mv")
    src = write_demo_dataset(root / "lerobot", episodes=6, height=32, width=48, workers=1)
    out = root / "dataset"  # one 9-frame clip per episode: 4 train, 2 val
    prepare(PrepareConfig(source=str(src), out=str(out), layout="separate", height=32, width=48, num_frames=9,
                          val_fraction=0.3, prompt_template="plain", workers=1, preset="ultrafast"), quiet=True)
    cfg = WorldtuneConfig(model=ModelConfig(name="tiny-predict2.5"),
                          cache=CacheConfig(dataset=str(out), device="cpu", dtype="fp32"))
    summary = cache_views(cfg)
    return out, summary


def test_cache_stores_every_view(separate_dataset):
    out, summary = separate_dataset
    info, rows = read_dataset(out)
    assert dataset_roles(info) == ROLES
    assert summary["failed"] == 0 and summary["encoded"] == len(rows) > 0
    cache = LatentCache(summary["cache"])
    assert cache.info["views"] == ROLES
    lat = cache.latents(view_key(rows[0]["clip_id"], "wrist"))
    assert tuple(lat.shape) == (16, 3, 4, 6)  # 9 frames -> 3 latent frames of 32x48 / 8
    clips = MultiViewCachedClips(rows, cache, ROLES, "train")
    item = clips[0]
    assert item["latents"].shape == (16, 9, 4, 6) and item["text"].ndim == 2
    torch.testing.assert_close(item["latents"][:, 6:], cache.latents(view_key(item["clip_id"], "wrist")))


def test_grid_dataset_is_refused(tmp_path):
    (tmp_path / "info.json").write_text(json.dumps({"layout": {"type": "grid"}}))
    with pytest.raises(DatasetError, match="separate"):
        dataset_roles(json.loads((tmp_path / "info.json").read_text()), tmp_path)


def test_lora_training_lowers_heldout_loss(separate_dataset):
    out, summary = separate_dataset
    _, rows = read_dataset(out)
    cache = LatentCache(summary["cache"])
    train, val = MultiViewCachedClips(rows, cache, ROLES, "train"), MultiViewCachedClips(rows, cache, ROLES, "val")
    assert len(train) >= 4 and len(val) >= 1
    torch.manual_seed(0)
    tr, _ = load_transformer("tiny-predict2.5")
    tr.crossattn_proj = torch.nn.Identity()  # the cache holds projected text (the adapter default)
    params = apply_training_mode(tr, "lora", LoraConfig(rank=8))
    mv = MultiViewTransformer(tr, len(ROLES), roles=ROLES)
    params += mv.extra_parameters()
    obj = FlowMatchingLoss()
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=1e-3)

    def loss_of(items, seeds, **force):
        x0 = torch.stack([it["latents"] for it in items])
        x0_views = x0.view(x0.shape[0], 16, len(ROLES), -1, *x0.shape[-2:])
        fb = multiview_flow_batch(obj, x0_views, seeds, **force)
        text = torch.stack([it["text"] for it in items])
        return obj.loss(mv(**transformer_inputs(fb, text, torch.float32))[0], fb)

    @torch.no_grad()
    def heldout() -> float:
        vals = [float(loss_of([val[i]], [1000 + 10 * i + j], sigma=[s], num_cond=[1]))
                for i in range(len(val)) for j, s in enumerate((0.3, 0.6, 0.9))]
        return sum(vals) / len(vals)

    before = heldout()
    gen = torch.Generator().manual_seed(0)
    for step in range(60):
        idx = torch.randint(0, len(train), (2,), generator=gen).tolist()
        loss = loss_of([train[i] for i in idx], [step * 2, step * 2 + 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = heldout()
    print(f"held-out loss {before:.4f} -> {after:.4f}")
    assert after < 0.9 * before, (before, after)
    assert mv.view_embed.abs().sum() > 0  # the view embedding trained too
