"""FLOP and parameter counts: exact against torch's FlopCounterMode on the tiny models, and the
DESIGN.md §3/§5 figures for the real configs (meta device, no weights)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from worldtune.errors import ConfigError
from worldtune.models.build import build_transformer
from worldtune.models.flops import forward_flops, latent_shape, train_step_flops
from worldtune.models.params import count_transformer_params
from worldtune.models.registry import get_spec


def _inputs(spec, batch: int, frames: int, height: int, width: int, per_token: bool):
    """Inputs shaped as the pipeline builds them: latents + condition mask, pixel-size padding mask."""
    shape = latent_shape(spec.transformer, frames, height, width)
    t, h, w = shape.frames, shape.height, shape.width
    return dict(
        hidden_states=torch.randn(batch, spec.transformer["in_channels"] - 1, t, h, w),
        condition_mask=torch.zeros(batch, 1, t, h, w),
        padding_mask=torch.zeros(1, 1, height, width),
        encoder_hidden_states=torch.randn(batch, spec.max_sequence_length, spec.text_embed_dim),
        timestep=torch.rand(batch, 1, t, 1, 1) if per_token else torch.rand(batch),
    )


@pytest.mark.parametrize("name", ["tiny-predict2.5", "tiny-predict2"])
def test_forward_flops_match_flop_counter(name):
    spec = get_spec(name)
    torch.manual_seed(0)
    model = build_transformer(spec).eval()
    batch, frames, height, width = 2, 17, 64, 112
    for per_token in (False, True):
        inputs = _inputs(spec, batch, frames, height, width, per_token)
        # the math SDPA kernel decomposes into bmm, which FlopCounterMode counts (the CPU flash kernel is not)
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(**inputs, return_dict=False)
        want = counter.get_total_flops()
        got = forward_flops(spec.transformer, frames, height, width, batch, spec.max_sequence_length, per_token).total
        assert abs(got - want) / want < 0.01, (name, per_token, got, want)


def test_per_token_timestep_costs_more():
    cfg = get_spec("cosmos-predict2.5-2b").transformer
    per_sample = forward_flops(cfg, 93, 432, 768, per_token_timestep=False)
    per_token = forward_flops(cfg, 93, 432, 768, per_token_timestep=True)
    assert per_token.parts["adaln_modulation"] > 1000 * per_sample.parts["adaln_modulation"]
    assert per_token.parts["self_attention"] == per_sample.parts["self_attention"]


@pytest.mark.parametrize("name,height,width,tokens,pflop", [
    ("cosmos-predict2.5-2b", 432, 768, 31_104, 0.34),
    ("cosmos-predict2.5-2b", 704, 1280, 84_480, 1.96),
    ("cosmos-predict2-14b", 432, 768, 31_104, 1.58),
])
def test_design_anchors(name, height, width, tokens, pflop):
    cfg = get_spec(name).transformer
    assert latent_shape(cfg, 93, height, width).tokens == tokens
    fwd = forward_flops(cfg, 93, height, width)
    assert fwd.total / 1e15 == pytest.approx(pflop, abs=0.006)
    assert train_step_flops(cfg, 93, height, width) == 3 * fwd.total
    if height == 704:
        assert fwd.attention_share == pytest.approx(0.84, abs=0.01)


def test_bad_clip_shape_is_a_config_error():
    cfg = get_spec("cosmos-predict2.5-2b").transformer
    with pytest.raises(ConfigError, match="multiples of 16x16"):
        forward_flops(cfg, 93, 430, 768)
    with pytest.raises(ConfigError, match="frames"):
        latent_shape(cfg, 0, 432, 768)


@pytest.mark.parametrize("name,total_b,lora_m", [
    ("cosmos-predict2.5-2b", 2.06, 45.9),
    ("cosmos-predict2-14b", 14.27, 143.9),
])
def test_parameter_counts_on_meta_device(name, total_b, lora_m):
    spec = get_spec(name)
    pc = count_transformer_params(spec.transformer, spec.lora_targets, rank=32)
    assert pc.total / 1e9 == pytest.approx(total_b, abs=0.005)
    assert pc.lora / 1e6 == pytest.approx(lora_m, abs=0.05)
    assert pc.targeted_modules == 10 * spec.transformer["num_layers"]  # 6 targets; q,k,v,out in both attentions
    assert pc.adapter(dora=True) > pc.lora
