"""The shipped recipes in configs/ load, and say what their comments promise."""

from pathlib import Path

import pytest

from worldtune.config import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.toml")))
def test_recipe_loads(name):
    load_config(CONFIGS / name)


def test_demo_recipe_is_the_demo():
    from worldtune.demo import DEFAULT_MODEL, default_steps, demo_config

    assert load_config(CONFIGS / "demo.toml") == demo_config(Path("demo_out"), default_steps(DEFAULT_MODEL), DEFAULT_MODEL)


def test_2b_lora_recipe():
    c = load_config(CONFIGS / "predict25_2b_lora_1gpu.toml")
    assert c.model.name == "cosmos-predict2.5-2b" and c.train.mode == "lora"
    assert (c.prepare.num_frames, c.prepare.height, c.prepare.width) == (93, 432, 768)
    assert c.train.lora.rank == 32 and c.train.lora.alpha == 32
    assert c.train.lr == 2**-14.5 and c.train.weight_decay == 1e-3 and c.train.warmup == 1000
    assert (c.train.f_max, c.train.f_min) == (0.5, 0.2)


def test_14b_grid_recipe():
    c = load_config(CONFIGS / "predict2_14b_droid_grid_8gpu.toml")
    assert c.model.name == "cosmos-predict2-14b" and c.train.mode == "full" and c.train.fsdp
    assert (c.prepare.num_frames, c.prepare.height, c.prepare.width, c.prepare.stride) == (93, 432, 768, 4)
    assert c.prepare.layout == "grid" and c.prepare.prompt_template == "droid_grid"
    assert c.cache.text == "raw"  # full fine-tuning trains on raw text embeddings


def test_cosmos3_forward_dynamics_recipe():
    """17 frames at the source rate (16 actions) filling the 480 tier's 480x832 canvas, as the comments say."""
    from worldtune.data.dynamics import choose_tier
    from worldtune.models.cosmos3_actions import action_canvas

    c = load_config(CONFIGS / "cosmos3_edge_forward_dynamics_1gpu.toml")
    assert c.model.name == "cosmos3-edge" and c.train.task == "forward_dynamics" and c.train.mode == "lora"
    assert (c.prepare.num_frames, c.prepare.stride, c.prepare.height, c.prepare.width) == (17, 1, 480, 832)
    assert c.prepare.actions.key == "action" and not c.prepare.only_successful
    assert c.train.dynamics.tier == 480 and action_canvas(480, 832, 480) == (480, 832)
    assert choose_tier(480, 832, "auto", action_canvas) == 480  # auto would choose the same tier
    assert (c.train.lora.rank, c.train.lora.alpha, tuple(c.train.betas)) == (16, 32, (0.9, 0.99))


def test_cosmos3_inverse_dynamics_recipe_shares_the_forward_dynamics_data():
    """The inverse-dynamics recipe reads the forward-dynamics recipe's prepared clips and action cache (same key)."""
    from worldtune.data.cache import cache_settings
    from worldtune.models.load import resolve_spec

    fd = load_config(CONFIGS / "cosmos3_edge_forward_dynamics_1gpu.toml")
    c = load_config(CONFIGS / "cosmos3_edge_inverse_dynamics_1gpu.toml")
    assert c.train.task == "inverse_dynamics" and c.train.mode == "lora" and c.train.out != fd.train.out
    assert c.prepare == fd.prepare and c.cache == fd.cache and c.train.dataset == fd.train.dataset
    assert c.train.dynamics == fd.train.dynamics and c.train.lora == fd.train.lora and c.train.lr == fd.train.lr
    info = {"height": 480, "width": 832, "num_frames": 17, "fps": 15, "layout": {"type": "grid"}}
    spec = resolve_spec(c.model.name, None)
    assert cache_settings(c, info, spec, "tokens")["key"] == cache_settings(fd, info, spec, "tokens")["key"]
