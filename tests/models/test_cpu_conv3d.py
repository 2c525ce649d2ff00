"""The Wan VAE's 3-D convolutions run on oneDNN on the CPU at batch 1, with the reference kernel's output."""

from __future__ import annotations

import copy

import pytest
import torch

from worldtune.models.build import build_vae, seeded
from worldtune.models.cpu_conv3d import route_conv3d_to_onednn
from worldtune.models.registry import get_spec

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")


def _ops(fn) -> set[str]:
    """The aten ops `fn` dispatched to."""
    with torch.autograd.profiler.profile() as prof:
        fn()
    return {e.key for e in prof.key_averages()}


@pytest.fixture(scope="module")
def vae():
    with seeded(0):
        return build_vae(get_spec("seed-predict2.5")).eval()


def test_batch_one_round_trip_leaves_the_reference_kernel_with_its_output(vae):
    x = torch.rand(1, 3, 9, 64, 112, generator=torch.Generator().manual_seed(0)) * 2 - 1
    routed = route_conv3d_to_onednn(copy.deepcopy(vae))

    def round_trip(model):
        with torch.no_grad():
            return model.decode(model.encode(x).latent_dist.mode()).sample

    assert "aten::slow_conv3d" in _ops(lambda: round_trip(vae))  # PyTorch's own choice at batch 1
    ops = _ops(lambda: round_trip(routed))
    assert "aten::slow_conv3d" not in ops and "aten::mkldnn_convolution" in ops
    torch.testing.assert_close(round_trip(routed), round_trip(vae), atol=1e-5, rtol=1e-5)


def test_gradients_match_and_other_dtypes_keep_pytorchs_path():
    conv = torch.nn.Conv3d(8, 8, 3, padding=(0, 1, 1))
    routed = route_conv3d_to_onednn(copy.deepcopy(conv))
    x = torch.randn(1, 8, 3, 16, 16, requires_grad=True)
    grads = []
    for m in (conv, routed):
        x.grad = None
        m.zero_grad()
        m(x).square().sum().backward()
        grads.append((x.grad.clone(), m.weight.grad.clone(), m.bias.grad.clone()))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-5)
    x64 = torch.randn(1, 8, 3, 16, 16, dtype=torch.float64)
    conv64, routed64 = conv.double(), routed.double()
    assert "aten::mkldnn_convolution" not in _ops(lambda: routed64(x64))
    assert torch.equal(routed64(x64), conv64(x64))


def test_loaded_pipelines_route_their_vae():
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline("tiny-predict2.5", seed=0)
    z = torch.zeros(1, pipe.vae.config.z_dim, 2, 8, 14)
    with torch.no_grad():
        ops = _ops(lambda: pipe.vae.decode(z))
    assert "aten::slow_conv3d" not in ops and "aten::mkldnn_convolution" in ops


def test_the_pytorch_switch_leaves_pytorchs_kernel_choice(monkeypatch):
    """`WORLDTUNE_CPU_CONV3D=pytorch`: a loaded VAE dispatches to the kernels a plain diffusers VAE of the same shapes
    dispatches to (the reference kernel among them), not to the oneDNN route."""
    from worldtune.models.load import load_pipeline

    default, _ = load_pipeline("tiny-predict2.5", seed=0)
    z = torch.zeros(1, default.vae.config.z_dim, 2, 8, 14)
    monkeypatch.setenv("WORLDTUNE_CPU_CONV3D", "pytorch")
    pipe, _ = load_pipeline("tiny-predict2.5", seed=0)
    with seeded(0):
        plain = build_vae(get_spec("tiny-predict2.5")).eval()
    with torch.no_grad():
        ops, routed, reference = (_ops(lambda m=m: m.decode(z)) for m in (pipe.vae, default.vae, plain))
    assert ops == reference and "aten::slow_conv3d" in ops
    assert "aten::slow_conv3d" not in routed


def test_an_unknown_kernel_name_is_refused_in_one_line(monkeypatch):
    from worldtune.errors import ConfigError

    monkeypatch.setenv("WORLDTUNE_CPU_CONV3D", "mkl")
    with pytest.raises(ConfigError, match=r"^WORLDTUNE_CPU_CONV3D='mkl': .*onednn.*pytorch"):
        route_conv3d_to_onednn(torch.nn.Conv3d(2, 2, 3))
