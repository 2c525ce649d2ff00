"""Speed switches compute what eager diffusers computes; the training benchmark runs on a CPU."""

from __future__ import annotations

import copy
import json
import types

import pytest
import torch

from worldtune.errors import ConfigError
from worldtune.models.build import build_transformer
from worldtune.models.registry import get_spec
from worldtune.models import speed
from worldtune.train.adapters import apply_training_mode
from worldtune.models.predict import transformer_inputs
from worldtune.train.flow import FlowMatchingLoss
from worldtune.train.trainer import apply_checkpointing

from tests.benchmark_module import load_benchmark

SPEC = get_spec("tiny-predict2.5")


@pytest.fixture(scope="module")
def base():
    torch.manual_seed(0)
    return build_transformer(SPEC)


def adapted(base, mode: str = "lora"):
    """A copy with adapters whose B matrices are random (so lora_A gets gradients too)."""
    model = copy.deepcopy(base)
    torch.manual_seed(1)
    lora = types.SimpleNamespace(rank=4, alpha=4, dropout=0.0, targets=list(SPEC.lora_targets), init="default")
    params = apply_training_mode(model, mode, lora)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model, params


def step(model, per_frame: bool = True):
    """Output and trainable gradients of one loss on a batch with 1 and 2 conditioning frames."""
    x0 = torch.randn(2, 16, 3, 8, 12, generator=torch.Generator().manual_seed(3))
    fb = FlowMatchingLoss(text_dropout=0.0).prepare(x0, [11, 12], num_cond=[1, 2])
    text = torch.randn(2, 7, SPEC.text_embed_dim, generator=torch.Generator().manual_seed(4))
    kwargs = transformer_inputs(fb, text, torch.float32)
    if not per_frame:
        kwargs["timestep"] = fb.sigma
    out = model(**kwargs)[0]
    FlowMatchingLoss.loss(out, fb).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads


def assert_same(ref, new, tol: float = 1e-5):
    (o0, g0), (o1, g1) = ref, new
    assert torch.allclose(o0, o1, atol=tol, rtol=tol), (o0 - o1).abs().max()
    assert g0.keys() == g1.keys() and any("lora_A" in k for k in g0)
    for k in g0:
        assert torch.allclose(g0[k], g1[k], atol=tol, rtol=tol), (k, (g0[k] - g1[k]).abs().max())
        assert g0[k].abs().max() > 0, k


def test_timestep_is_per_frame():
    """The test inputs really carry different timesteps per frame (else fusion would be trivial)."""
    fb = FlowMatchingLoss(text_dropout=0.0).prepare(torch.zeros(2, 16, 3, 8, 12), [11, 12], num_cond=[1, 2])
    assert fb.timestep.shape == (2, 1, 3, 1, 1)
    assert fb.timestep[0, 0, 0] != fb.timestep[0, 0, 2] and fb.timestep[1, 0, 1] != fb.timestep[1, 0, 2]


@pytest.mark.parametrize("mode", ["lora", "dora"])
def test_fused_adaln_equals_eager(base, mode):
    ref_model, _ = adapted(base, mode)
    model, _ = adapted(base, mode)
    keys = list(model.state_dict())
    rows = []
    model.transformer_blocks[0].norm1.linear_1.register_forward_hook(lambda m, a, o: rows.append(a[0].shape))
    info = speed.apply_speed(model, fused_adaln=True)
    assert info["fused_adaln"] and list(model.state_dict()) == keys
    assert_same(step(ref_model), step(model))
    hidden = SPEC.transformer["num_attention_heads"] * SPEC.transformer["attention_head_dim"]
    assert rows == [torch.Size([2, 3, hidden])]  # the modulation ran on 3 frames, not on 3 x 4 x 6 tokens


def test_fused_adaln_with_checkpointing_either_order(base):
    ref = step(adapted(base)[0])
    before, _ = adapted(base)
    speed.apply_speed(before, fused_adaln=True, attention="math")
    apply_checkpointing(before, [0, 1])
    after, _ = adapted(base)
    apply_checkpointing(after, [0])
    speed.apply_speed(after, fused_adaln=True, attention="math")
    assert type(after.transformer_blocks[0]).__name__ == "SpeedCosmosTransformerBlock"
    assert after.transformer_blocks[0].forward.args[0].__func__ is type(after.transformer_blocks[0]).forward
    assert_same(ref, step(before))
    assert_same(ref, step(after))


def test_selective_checkpointing_keeps_attention_and_equals_eager(base, monkeypatch):
    ref = step(adapted(base)[0])
    model, _ = adapted(base)
    speed.apply_speed(model, fused_adaln=True)
    speed.apply_selective_checkpointing(model, [0, 1])
    decisions = []
    policy = speed._keep_attention_policy
    monkeypatch.setattr(speed, "_keep_attention_policy", lambda *a, **k: decisions.append(policy(*a, **k))
                        or decisions[-1])
    assert_same(ref, step(model))
    saved = [d for d in decisions if d.name == "MUST_SAVE"]
    assert len(saved) == 2 * 2  # self + cross attention of 2 blocks, saved in forward (recompute reuses them)
    assert len(decisions) > 10 * len(saved)  # everything else is recomputed


def test_fused_adaln_full_finetune_and_1d_timestep(base):
    ref_model, model = copy.deepcopy(base), copy.deepcopy(base)
    for m in (ref_model, model):
        m.requires_grad_(True)
    speed.fuse_adaln_per_frame(model)
    (o0, g0), (o1, g1) = step(ref_model, per_frame=False), step(model, per_frame=False)
    assert torch.allclose(o0, o1, atol=1e-5)
    assert g0.keys() == g1.keys() and "time_embed.t_embedder.linear_1.weight" in g0
    for k in g0:
        assert torch.allclose(g0[k], g1[k], atol=1e-5, rtol=1e-4), k


def test_bad_switches_are_clear_errors(base):
    model = copy.deepcopy(base)
    with pytest.raises(ConfigError, match="cuda_graphs"):
        speed.apply_speed(model, fused_adaln=False, cuda_graphs=True)
    with pytest.raises(ConfigError, match="attention"):
        speed.apply_speed(model, fused_adaln=False, attention="sage")


def test_per_block_bytes_fused_is_smaller():
    real = get_spec("cosmos-predict2.5-2b")
    plain = speed.per_block_bytes(real, 24, 54, 96, mode="lora", fused_adaln=False)
    fused = speed.per_block_bytes(real, 24, 54, 96, mode="lora", fused_adaln=True)
    assert 4 * 2**30 < fused < plain < 8 * 2**30  # ~5-7 GiB per block at 93x432x768 (docs/benchmarks.md)
    assert plain - fused == 31104 * 12 * 2 * 2048  # (1 + scale) and three [N, 3D] modulations, bf16
    assert speed.per_block_bytes(real, 24, 54, 96, batch=2, fused_adaln=True) > 1.9 * fused


def test_train_bench_tiny_cpu(tmp_path, base, capsys, float8_on_cpu):
    """Every variant of the benchmark on the tiny spec, in-process (the libraries are already imported); the float8
    variant through torchao on the CPU (the `float8_on_cpu` fixture)."""
    out = tmp_path / "tb.json"
    bench = load_benchmark("train_bench")
    assert bench.main(["--tiny", "--device", "cpu", "--warmup", "0", "--steps", "1", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    res = json.loads(out.read_text())
    rows = {r["name"]: r for r in res["rows"]}
    cuda_only = {"sdpa", "B_fused_flash", "B_fused_efficient", "B_fused_cudnn", "B_cudagraphs"}
    for name, r in rows.items():
        expected = "skipped: CUDA only" if name in cuda_only else "ok"
        assert r["status"] == expected, (name, r["status"])
        if expected == "ok":
            assert r["median_s"] > 0 and r["checkpointed_blocks"] is not None
    for name in ("B_best", "B_sac"):
        num = rows[name]["numerics"]
        assert num["loss_rel_diff"] < 1e-5 and num["grad_rel_diff_max_tensor"] < 1e-4 and num["tensors"] > 0
    fp8 = rows["B_best_fp8"]["numerics"]  # float8 training: near the eager step, not equal to it
    assert rows["B_best_fp8"]["fp8_linears"] > 0 and 0 < fp8["grad_rel_diff_global"] < 0.15, fp8
    assert rows["C_full"]["trainable_params"] == sum(p.numel() for p in base.parameters())  # every DiT weight
    assert rows["B_eager"]["trainable_params"] < rows["D_dora"]["trainable_params"]  # DoRA adds magnitudes
    assert "A_example" in stdout and "B_best_704" in stdout  # the table was printed
