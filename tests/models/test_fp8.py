"""FP8 linears (models/fp8.py): the matmul is the product of the dequantised operands, each token and output channel
keeps its own scale, padding rows never leak into real ones, and only the blocks' plain linears change."""

from __future__ import annotations

import copy
import types

import pytest
import torch

from worldtune.models.build import build_transformer
from worldtune.models.fp8 import Float8Linear, quantize_blocks, quantize_rows
from worldtune.models.predict import transformer_inputs
from worldtune.models.registry import get_spec
from worldtune.models.speed import repeated_blocks
from worldtune.train.adapters import apply_training_mode
from worldtune.train.flow import FlowMatchingLoss

SPEC = get_spec("tiny-predict2.5")


def linear(n_in: int = 64, n_out: int = 48, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out)


def test_the_matmul_is_the_product_of_the_dequantised_operands():
    lin = linear()
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    q, s = quantize_rows(x)
    w = lin.weight.detach()
    qw, sw = quantize_rows(w)
    ref = (q.double() * s.double()) @ (qw.double() * sw.double()).T + lin.bias.detach().double()
    got = Float8Linear(lin)(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_each_token_keeps_its_precision_whatever_the_others_magnitude():
    """Row-wise scales: a token a million times smaller than its neighbour is still multiplied to e4m3's relative
    precision (one scale for the whole tensor would flush it to zero)."""
    lin = linear()
    x = torch.randn(48, 64, generator=torch.Generator().manual_seed(2))
    x[0::3] *= 1e-3
    x[1::3] *= 1e3
    exact = torch.nn.functional.linear(x.double(), lin.weight.double())
    got = Float8Linear(lin)(x).double() - lin.bias.detach().double()
    rel = (got - exact).norm(dim=-1) / exact.norm(dim=-1)
    assert rel.max() < 0.06  # e4m3 keeps 3 mantissa bits: a relative step of 1/16 at most, averaging far less


def test_rows_that_pad_to_a_multiple_of_16_give_what_they_give_alone():
    layer = Float8Linear(linear())
    x = torch.randn(37, 64, generator=torch.Generator().manual_seed(3))
    whole = layer(x.view(1, 37, 64))
    assert whole.shape == (1, 37, 48)
    for i in (0, 16, 36):
        torch.testing.assert_close(whole[0, i], layer(x[i:i + 1])[0], rtol=1e-6, atol=1e-6)


def with_lora_on_attention() -> torch.nn.Module:
    """The tiny Predict2.5 transformer with a LoRA (random B) on its attention's q/k/v."""
    torch.manual_seed(0)
    model = build_transformer(SPEC)
    lora = types.SimpleNamespace(rank=4, alpha=4, dropout=0.0, targets=["to_q", "to_k", "to_v"], init="default")
    apply_training_mode(model, "lora", lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.3)
    return model


def test_only_the_blocks_plain_linears_change_and_adapters_keep_working():
    model = with_lora_on_attention()
    lora_on = copy.deepcopy(model)
    n = quantize_blocks(model)
    inside = {id(m) for b in repeated_blocks(model) for m in b.modules()}
    fp8 = [(name, m) for name, m in model.named_modules() if isinstance(m, Float8Linear)]
    assert n == len(fp8) > 0
    assert all(id(m) in inside for _, m in fp8)  # embeddings and the output projection stay as they were
    assert not any("lora_" in name for name, _ in fp8)  # the adapter's own layers stay full precision
    assert any(name.endswith("base_layer") for name, _ in fp8)  # the layer it wraps does not

    x0 = torch.randn(2, 16, 3, 8, 12, generator=torch.Generator().manual_seed(4))
    batch = FlowMatchingLoss(text_dropout=0.0).prepare(x0, [11, 12], num_cond=[1, 1])
    text = torch.randn(2, 7, SPEC.text_embed_dim, generator=torch.Generator().manual_seed(5))
    kw = transformer_inputs(batch, text, torch.float32)
    with torch.no_grad():
        ref, low = lora_on(**kw)[0], model(**kw)[0]
        model.disable_lora()
        no_lora = model(**kw)[0]
    err = (low - ref).norm() / ref.norm()
    assert err < 0.05, err  # the whole model, FP8 against fp32
    assert (no_lora - low).norm() / ref.norm() > 5 * err  # the adapter's part is still there, above FP8's error


def test_a_gpu_without_fp8_matmuls_is_a_one_line_error(monkeypatch):
    from worldtune.errors import ConfigError
    from worldtune.models.fp8 import apply_fp8

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ConfigError, match=r"^generate.fp8: fp8 needs .* A100-SXM4-80GB is 8\.0: turn fp8 off$"):
        apply_fp8(torch.nn.Linear(16, 16), torch.device("cuda"), "generate.fp8")
