"""The Cosmos 3 activation model (models/cosmos3_memory.py) against what autograd really keeps on the tiny spec."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from worldtune.models.cosmos3 import transformer_inputs
from worldtune.models.cosmos3_memory import Cosmos3Dims, estimate_activations, layer_bytes_per_key, \
    layer_bytes_per_video_token, tokens
from worldtune.models.family import family_of
from worldtune.models.registry import get_spec
from worldtune.train.adapters import apply_training_mode

RANK = 4


@pytest.fixture(scope="module")
def lora_model():
    """tiny-cosmos3 as the trainer runs it on CUDA: bf16 weights, fp32 time embedder, fp32 LoRA adapters."""
    spec = get_spec("tiny-cosmos3")
    family = family_of(spec)
    torch.manual_seed(0)
    model = family.build_transformer("cpu", torch.bfloat16)
    model.time_embedder.float()
    apply_training_mode(model, "lora", SimpleNamespace(rank=RANK, alpha=8.0, dropout=0.0, targets=None,
                                                       init="default"), family)
    return model


def saved_bytes_per_layer(model, frames: int, height: int, width: int, text: int) -> list[int]:
    """Bytes of the distinct storages autograd saves inside each decoder layer during one forward: parameters,
    1-D weight copies and tensors shared with other layers (the rotary tables) left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: list[dict[int, int]] = [{} for _ in model.layers]
    current = [None]
    hooks = []
    for i, layer in enumerate(model.layers):
        hooks.append(layer.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i)))
        hooks.append(layer.register_forward_hook(lambda m, a, o: current.__setitem__(0, None)))

    def pack(t):
        st = t.untyped_storage()
        if current[0] is not None and t.dim() > 1 and st.data_ptr() not in params:
            seen[current[0]][st.data_ptr()] = st.nbytes()
        return t

    x = torch.randn(1, 48, (frames - 1) // 4 + 1, height // 16, width // 16, dtype=torch.bfloat16)
    ids = torch.arange(text) % 300
    kw = transformer_inputs(model.config, ids, x, torch.full((x.shape[2],), 0.6), 1, 16.0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**kw)[0][0].float().square().mean().backward()
    for h in hooks:
        h.remove()
    shared = set(seen[0]) & set(seen[1])
    return [sum(b for p, b in s.items() if p not in shared) for s in seen]


@pytest.mark.parametrize("frames,height,width,text", [(9, 64, 96, 37), (13, 96, 64, 80)])
def test_layer_bytes_equal_what_autograd_saves(lora_model, frames, height, width, text):
    spec = get_spec("tiny-cosmos3")
    dims = Cosmos3Dims.from_config(spec.transformer)
    n = tokens(spec.transformer, frames, height, width)
    predicted = n * layer_bytes_per_video_token(dims, RANK) + (n + text) * layer_bytes_per_key(dims)
    measured = saved_bytes_per_layer(lora_model, frames, height, width, text)
    # the first layer's input comes from frozen modules (nothing to differentiate there); every later layer's does not
    assert measured[1:] == [predicted] * (dims.layers - 1)
    est = estimate_activations(spec.transformer, frames, height, width, rank=RANK, text_tokens=text, compiled=False)
    assert est.per_block_full == predicted


def test_checkpointing_keeps_less_and_the_plan_uses_the_cosmos3_model():
    from worldtune.models.memory import plan

    spec = get_spec("cosmos3-edge")
    cfg = spec.transformer
    none = estimate_activations(cfg, 93, 480, 832, rank=16, compiled=False)
    full = estimate_activations(cfg, 93, 480, 832, rank=16, checkpointed_blocks=28, compiled=False)
    sel = estimate_activations(cfg, 93, 480, 832, rank=16, checkpointed_blocks=28, selective=True, compiled=False)
    assert full.total < sel.total < none.total
    p = plan(spec, "lora", 93, 480, 832, lora_rank=16, grad_checkpointing="off")
    act = next(line.gib for line in p.lines if line.item.startswith("activations: 28 blocks stored"))
    assert act == pytest.approx(28 * estimate_activations(cfg, 93, 480, 832, rank=16).per_block_full / 2**30)
    assert p.fits and p.checkpointed_blocks == 0
