"""The multi-view wrapper: per-view attention with a zero view embedding IS the single-view model.

Tiny Predict2.5 DiT on the CPU, 3 views x 3 latent frames of 8x12 latents, per-frame 5-D
timesteps and a clean first latent frame in every view.
"""

from __future__ import annotations

import pytest
import torch

from worldtune.errors import CheckpointError, ModelError
from worldtune.models.build import build_transformer
from worldtune.models.multiview import (
    MultiViewTransformer, from_extras, load_multiview_extras, multiview_flow_batch, save_multiview_extras,
    stack_views, unstack_views)
from worldtune.models.registry import LORA_TARGETS, get_spec
from worldtune.models.predict import transformer_inputs
from worldtune.train.flow import FlowMatchingLoss

V, T, H, W, B = 3, 3, 8, 12, 2


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    return build_transformer(get_spec("tiny-predict2.5")).eval()


def _inputs(seed: int = 0, same_views: bool = False) -> dict:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, 16, V * T, H, W, generator=g)
    if same_views:
        x = x[:, :, :T].repeat(1, 1, V, 1, 1)
    ts = torch.rand(B, 1, V * T, 1, 1, generator=g)
    cm = torch.zeros(B, 1, V * T, H, W)
    cm[:, :, 0::T] = 1  # first latent frame of every view is a condition
    ts[:, :, 0::T] = 1e-4
    return dict(hidden_states=x, timestep=ts, encoder_hidden_states=torch.randn(B, 7, 32, generator=g),
                condition_mask=cm, padding_mask=torch.zeros(1, 1, H * 8, W * 8), return_dict=False)


def _view(kw: dict, v: int) -> dict:
    sl = slice(v * T, (v + 1) * T)
    return {**kw, "hidden_states": kw["hidden_states"][:, :, sl], "timestep": kw["timestep"][:, :, sl],
            "condition_mask": kw["condition_mask"][:, :, sl]}


@torch.no_grad()
def test_per_view_with_zero_embedding_equals_single_view(transformer):
    mv = MultiViewTransformer(transformer, V, attention="per_view")
    assert torch.count_nonzero(mv.view_embed) == 0
    kw = _inputs()
    out = mv(**kw)[0]
    assert out.shape == (B, 16, V * T, H, W)
    for v in range(V):
        ref = transformer(**_view(kw, v))[0]
        torch.testing.assert_close(out[:, :, v * T:(v + 1) * T], ref, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_joint_attention_mixes_views(transformer):
    kw = _inputs()
    joint = MultiViewTransformer(transformer, V, attention="joint")(**kw)[0]
    per_view = MultiViewTransformer(transformer, V, attention="per_view")(**kw)[0]
    assert (joint - per_view).abs().max() > 1e-2
    # identical views at identical (repeated) positions: joint attention sees V copies of the same keys,
    # which leaves softmax attention unchanged, so the views must come out equal to the single view
    same = _inputs(same_views=True)
    same["timestep"] = same["timestep"][:, :, :T].repeat(1, 1, V, 1, 1)
    out = MultiViewTransformer(transformer, V, attention="joint")(**same)[0]
    ref = transformer(**_view(same, 0))[0]
    for v in range(V):
        torch.testing.assert_close(out[:, :, v * T:(v + 1) * T], ref, atol=1e-5, rtol=1e-5)


def test_view_embedding_gets_gradients_and_changes_output(transformer):
    mv = MultiViewTransformer(transformer, V)
    kw = _inputs()
    out = mv(**kw)[0]
    out.square().mean().backward()
    g = mv.view_embed.grad
    assert g is not None and torch.all(g.abs().sum(1) > 0)  # every view's row learns
    with torch.no_grad():
        mv.view_embed[1].normal_()
        out2 = mv(**kw)[0]
    transformer.zero_grad(set_to_none=True)
    assert (out2 - out.detach()).abs().max() > 1e-3


def test_lora_and_checkpointing_through_wrapper():
    from peft import LoraConfig

    torch.manual_seed(0)
    tr = build_transformer(get_spec("tiny-predict2.5"))
    mv = MultiViewTransformer(tr, V)
    kw = _inputs()
    with torch.no_grad():
        base = mv(**kw)[0]
    tr.requires_grad_(False)
    tr.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=list(LORA_TARGETS), init_lora_weights="gaussian"))
    lora = [p for n, p in tr.named_parameters() if "lora_" in n]
    for p in lora:
        p.requires_grad_(True)
    with torch.no_grad():
        for n, p in tr.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
        tuned = mv(**kw)[0]
    assert (tuned - base).abs().max() > 1e-3  # the adapter acts through the wrapper's forward
    tr.enable_gradient_checkpointing()
    calls = []
    fn = tr._gradient_checkpointing_func
    tr._gradient_checkpointing_func = lambda *a, **k: calls.append(1) or fn(*a, **k)
    mv(**kw)[0].square().mean().backward()
    assert len(calls) == len(tr.transformer_blocks)  # each block recomputed
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
    assert mv.view_embed.grad is not None


def test_flow_batch_conditions_every_view():
    obj = FlowMatchingLoss()
    x0 = torch.randn(2, 16, V, T, 4, 6)
    fb = multiview_flow_batch(obj, x0, seeds=[1, 2], sigma=[0.5, 0.7], num_cond=[1, 2])
    assert fb.x_t.shape == (2, 16, V * T, 4, 6)
    cond = fb.condition_mask[:, 0, :, 0, 0]
    expect = torch.tensor([[1, 0, 0] * V, [1, 1, 0] * V], dtype=torch.float32)
    torch.testing.assert_close(cond, expect)
    stacked = x0.reshape(2, 16, V * T, 4, 6)
    keep = cond.bool().view(2, 1, V * T, 1, 1).expand_as(stacked)
    torch.testing.assert_close(fb.x_t[keep], stacked[keep])  # condition frames are clean
    assert (fb.x_t[~keep] - stacked[~keep]).abs().mean() > 0.1
    torch.testing.assert_close(fb.timestep[:, 0, :, 0, 0][cond.bool()], torch.full((int(cond.sum()),), 1e-4))
    single = obj.prepare(stacked, [1, 2], sigma=[0.5, 0.7], num_cond=[1, 2])
    torch.testing.assert_close(fb.target, single.target)  # same draws as the single-view objective
    kw = transformer_inputs(fb, torch.randn(2, 5, 32), torch.float32)
    assert kw["timestep"].shape == (2, 1, V * T, 1, 1)


def test_stack_unstack_roundtrip():
    lat = {r: torch.randn(16, T, 4, 6) for r in ("a", "b", "c")}
    x = stack_views(lat, ["c", "a", "b"])
    assert x.shape == (16, 3 * T, 4, 6)
    torch.testing.assert_close(unstack_views(x[None], 3)[0, :, 0], lat["c"])
    with pytest.raises(ModelError, match="missing"):
        stack_views(lat, ["a", "d"])


def test_extras_roundtrip(transformer, tmp_path):
    mv = MultiViewTransformer(transformer, V, attention="per_view", roles=["e1", "e2", "wrist"])
    with torch.no_grad():
        mv.view_embed.normal_()
    save_multiview_extras(tmp_path, mv)
    assert {p.name for p in tmp_path.iterdir()} == {"multiview.safetensors", "multiview.json"}
    back = from_extras(tmp_path, transformer)
    assert back.attention == "per_view" and back.roles == ["e1", "e2", "wrist"]
    torch.testing.assert_close(back.view_embed, mv.view_embed)
    with pytest.raises(CheckpointError, match="2 x"):
        load_multiview_extras(tmp_path, MultiViewTransformer(transformer, 2))
    with pytest.raises(CheckpointError, match="does not exist"):
        from_extras(tmp_path / "nope", transformer)


def test_bad_inputs_are_one_line_errors(transformer):
    with pytest.raises(ModelError, match="attention"):
        MultiViewTransformer(transformer, V, attention="cross")  # type: ignore[arg-type]
    kw = _inputs()
    kw["hidden_states"] = kw["hidden_states"][:, :, :8]
    with pytest.raises(ModelError, match="cannot hold 3 views"):
        MultiViewTransformer(transformer, V)(**kw)
