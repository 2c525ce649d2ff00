"""Float8 through torchao (models/float8.py): the inference matmul is the product of the row-wise quantised operands,
each token keeps its own scale, float8 training keeps gradients near full precision's, only the blocks' plain
linears change, and torchao missing or a device without float8 matmuls is a one-line error.

torchao refuses float8 on the CPU by a hardware check alone; the `float8_on_cpu` fixture lifts it (and worldtune's
own), so these tests run the same tensors and torch's own float8 matmul, or skip with the reason."""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch

from worldtune.errors import ConfigError
from worldtune.models.build import build_transformer
from worldtune.models.predict import transformer_inputs
from worldtune.models.registry import get_spec
from worldtune.models.speed import repeated_blocks
from worldtune.train.adapters import apply_training_mode
from worldtune.train.flow import FlowMatchingLoss

SPEC = get_spec("tiny-predict2.5")
E4M3_MAX = 448.0


def linear(n_in: int = 64, n_out: int = 48, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out)


def dequantised(t: torch.Tensor, dtype: torch.dtype, rowwise: bool = True) -> torch.Tensor:
    """e4m3 quantise-dequantise in float64, scales from the tensor in `dtype` (torchao computes a scale in its
    input's dtype): one scale per row, or one for the tensor."""
    t = t.detach().to(dtype)
    amax = t.abs().amax(-1, keepdim=True) if rowwise else t.abs().amax()
    scale = (amax / E4M3_MAX).float()
    return (t.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).double() * scale.double()


def quantised(lin: torch.nn.Linear) -> torch.nn.Linear:
    from worldtune.models.float8 import _quantize

    _quantize([lin], lin)
    return lin


def test_the_matmul_is_the_product_of_the_row_wise_quantised_operands(float8_on_cpu):
    lin = linear()
    w, bias = lin.weight.detach().clone(), lin.bias.detach().to(torch.bfloat16).double()
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    got = quantised(lin)(x).double()
    rows = dequantised(x, torch.float32) @ dequantised(w, torch.bfloat16).T + bias
    per_tensor = dequantised(x, torch.float32, False) @ dequantised(w, torch.bfloat16, False).T + bias
    err = (got - rows).abs().max()
    assert err < 1e-5, err  # torch's float8 matmul accumulates in float32
    assert (got - per_tensor).abs().max() > 1000 * err  # one scale per tensor would not pass this check


def test_each_token_keeps_its_precision_whatever_the_others_magnitude(float8_on_cpu):
    """Row-wise scales: a token a million times smaller than its neighbour is still multiplied to e4m3's relative
    precision (one scale for the whole tensor would flush it to zero)."""
    lin = linear()
    exact_w = lin.weight.detach().double()
    x = torch.randn(48, 64, generator=torch.Generator().manual_seed(2))
    x[0::3] *= 1e-3
    x[1::3] *= 1e3
    exact = x.double() @ exact_w.T
    got = quantised(lin)(x).double() - lin.bias.detach().double()
    rel = (got - exact).norm(dim=-1) / exact.norm(dim=-1)
    assert rel.max() < 0.06  # e4m3 keeps 3 mantissa bits: a relative step of 1/16 at most, averaging far less


def with_adapter(mode: str = "lora") -> torch.nn.Module:
    """The tiny Predict2.5 transformer with a LoRA or DoRA (random B) on its attention's q/k/v."""
    torch.manual_seed(0)
    model = build_transformer(SPEC)
    lora = types.SimpleNamespace(rank=4, alpha=4, dropout=0.0, targets=["to_q", "to_k", "to_v"], init="default")
    apply_training_mode(model, mode, lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.3)
    return model


def model_inputs(seed: int = 4) -> dict:
    x0 = torch.randn(2, 16, 3, 8, 12, generator=torch.Generator().manual_seed(seed))
    batch = FlowMatchingLoss(text_dropout=0.0).prepare(x0, [11, 12], num_cond=[1, 1])
    text = torch.randn(2, 7, SPEC.text_embed_dim, generator=torch.Generator().manual_seed(seed + 1))
    return transformer_inputs(batch, text, torch.float32)


def test_only_the_blocks_plain_linears_change_and_adapters_keep_working(float8_on_cpu):
    from torchao.quantization import Float8Tensor

    from worldtune.models.float8 import quantize_blocks

    model = with_adapter()
    lora_on = copy.deepcopy(model)
    n = quantize_blocks(model, torch.device("cpu"), "generate.fp8")
    inside = {id(m) for b in repeated_blocks(model) for m in b.modules()}
    fp8 = [(name, m) for name, m in model.named_modules()  # peft's wrapper shows its base layer's weight: not it
           if type(m) is torch.nn.Linear and isinstance(m.weight, Float8Tensor)]
    assert n == len(fp8) > 0
    assert all(id(m) in inside for _, m in fp8)  # embeddings and the output projection stay as they were
    assert not any("lora_" in name for name, _ in fp8)  # the adapter's own layers stay full precision
    assert any(name.endswith("base_layer") for name, _ in fp8)  # the layer it wraps does not

    kw = model_inputs()
    with torch.no_grad():
        ref, low = lora_on(**kw)[0], model(**kw)[0]
        model.disable_lora()
        no_lora = model(**kw)[0]
    err = (low - ref).norm() / ref.norm()
    assert err < 0.05, err  # the whole model, float8 against fp32
    assert (no_lora - low).norm() / ref.norm() > 5 * err  # the adapter's part is still there, above float8's error


def test_a_dora_base_layer_stays_full_precision_for_inference(float8_on_cpu):
    from torchao.quantization import Float8Tensor

    from worldtune.models.float8 import quantize_blocks

    model = with_adapter("dora")
    assert quantize_blocks(model, torch.device("cpu"), "generate.fp8") > 0
    bases = [m for name, m in model.named_modules() if name.endswith("base_layer")]
    assert bases and not any(isinstance(m.weight, Float8Tensor) for m in bases)
    with torch.no_grad():
        assert torch.isfinite(model(**model_inputs())[0]).all()


@pytest.mark.parametrize("mode", ["lora", "dora", "full"])
def test_float8_training_keeps_the_gradients_near_full_precisions(float8_on_cpu, mode):
    """train.fp8: the blocks' linears (a LoRA's or DoRA's frozen base, every one of a full fine-tune) train in
    float8; the adapter's layers do not; the trained parameters are the same objects (the optimizer holds them) and
    their gradients stay near fp32's."""
    from torchao.float8.float8_linear import Float8Linear

    from worldtune.models.float8 import float8_training

    model = with_adapter(mode) if mode != "full" else build_transformer(SPEC)
    ref = copy.deepcopy(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    n = float8_training(model, torch.device("cpu"))
    converted = [name for name, m in model.named_modules() if isinstance(m, Float8Linear)]
    assert n == len(converted) > 0 and not any("lora_" in name for name in converted)
    if mode != "full":  # the frozen layers an adapter wraps train in float8
        assert any(name.endswith("base_layer") for name in converted)
    assert [p for p in model.parameters() if p.requires_grad] == trained

    kw = model_inputs(seed=6)
    for m in (model, ref):
        m(**kw)[0].pow(2).mean().backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    worst = 0.0
    for name, p in ref.named_parameters():
        if p.requires_grad and p.grad is not None and p.grad.norm() > 0:
            rel = (grads[name] - p.grad).norm() / p.grad.norm()
            worst = max(worst, float(rel))
    assert 0 < worst < 0.15, worst  # float8 moves each gradient by a few per cent (measured: 0.076 to 0.090)


def test_torchao_missing_is_a_one_line_error(monkeypatch):
    from worldtune.models.float8 import float8_training, quantize_blocks

    monkeypatch.setitem(sys.modules, "torchao", None)  # `import torchao` raises ImportError
    for fn, option in ((quantize_blocks, "serve.fp8"), (float8_training, "train.fp8")):
        with pytest.raises(ConfigError, match=rf"^{option}: float8 runs through torchao, which is not installed: "
                                              r"pip install 'worldtune\[fp8\]' \(or turn .* off\)$"):
            fn(torch.nn.Linear(16, 16), torch.device("cuda"), option)


def test_a_device_without_float8_matmuls_is_a_one_line_error(monkeypatch):
    pytest.importorskip("torchao", reason="torchao (the fp8 extra) is missing")
    from worldtune.models.float8 import float8_training, quantize_blocks

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    lin = torch.nn.Linear(16, 16)
    with pytest.raises(ConfigError, match=r"^generate.fp8: float8 needs .* A100-SXM4-80GB is 8\.0: turn generate.fp8 "
                                          r"off$"):
        quantize_blocks(lin, torch.device("cuda"), "generate.fp8")
    with pytest.raises(ConfigError, match=r"^train.fp8: float8 needs a CUDA GPU .*; this run is on cpu: turn "
                                          r"train.fp8 off$"):
        float8_training(lin, torch.device("cpu"), "train.fp8")
    assert type(lin) is torch.nn.Linear and type(lin.weight) is torch.nn.Parameter  # refused before any change
