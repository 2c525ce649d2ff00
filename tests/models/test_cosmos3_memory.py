"""The Cosmos 3 activation model (models/cosmos3_memory.py) against what autograd really keeps on the tiny spec."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from worldtune.models.cosmos3 import transformer_inputs
from worldtune.models.cosmos3_actions import action_run_inputs, train_domain_rows
from worldtune.models.cosmos3_memory import Cosmos3Dims, estimate_activations, layer_bytes_per_key, \
    layer_bytes_per_reasoner_token, layer_bytes_per_video_token, tokens
from worldtune.models.family import family_of
from worldtune.models.registry import get_spec
from worldtune.train.adapters import apply_training_mode

RANK = 4
DOMAIN = 8  # an embodiment slot of the action heads (droid_lerobot's)


def tiny_lora_model():
    """tiny-cosmos3 as the trainer runs it on CUDA: bf16 weights, fp32 time embedder, fp32 LoRA adapters."""
    spec = get_spec("tiny-cosmos3")
    family = family_of(spec)
    torch.manual_seed(0)
    model = family.build_transformer("cpu", torch.bfloat16)
    model.time_embedder.float()
    apply_training_mode(model, "lora", SimpleNamespace(rank=RANK, alpha=8.0, dropout=0.0, targets=None,
                                                       init="default"), family)
    return model


@pytest.fixture(scope="module")
def lora_model():
    return tiny_lora_model()


@pytest.fixture(scope="module")
def action_model():
    """The same with one embodiment domain's action rows trained, as the trainer runs forward dynamics."""
    model = tiny_lora_model()
    train_domain_rows(model, DOMAIN, outputs=False)
    return model


def latents(frames: int, height: int, width: int) -> torch.Tensor:
    return torch.randn(1, 48, (frames - 1) // 4 + 1, height // 16, width // 16, dtype=torch.bfloat16)


def saved_bytes_per_layer(model, kw: dict) -> list[int]:
    """Bytes of the distinct storages autograd saves inside each decoder layer during one forward of the transformer
    inputs `kw`: parameters, 1-D weight copies and tensors shared with other layers (the rotary tables) left out."""
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
    x = latents(frames, height, width)
    kw = transformer_inputs(lora_model.config, torch.arange(text) % 300, x, torch.full((x.shape[2],), 0.6), 1, 16.0)
    measured = saved_bytes_per_layer(lora_model, kw)
    # the first layer's input comes from frozen modules (nothing to differentiate there); every later layer's does not
    assert measured[1:] == [predicted] * (dims.layers - 1)
    est = estimate_activations(spec.transformer, frames, height, width, rank=RANK, text_tokens=text, compiled=False)
    assert est.per_block_full == predicted


@pytest.mark.parametrize("frames,height,width,text,steps", [(9, 64, 96, 37, 8), (13, 96, 64, 80, 12)])
def test_an_action_run_keeps_the_reasoner_too(action_model, frames, height, width, text, steps):
    """Forward dynamics (first latent frame clean, the actions in the sequence, the domain's rows trained): the
    action tokens join the generator's, and the reasoner's text stream keeps its activations as well."""
    spec = get_spec("tiny-cosmos3")
    dims = Cosmos3Dims.from_config(spec.transformer)
    x = latents(frames, height, width)
    sigma = torch.full((x.shape[2],), 0.6)
    sigma[0] = 0.0
    kw = action_run_inputs(action_model.config, torch.arange(text) % 300, x, sigma, torch.rand(steps, 10) * 2 - 1,
                           DOMAIN, 16.0, clean_frames=1, action_sigma=None)
    n = tokens(spec.transformer, frames, height, width) + steps
    plain = n * layer_bytes_per_video_token(dims, RANK) + (n + text) * layer_bytes_per_key(dims)
    predicted = plain + text * layer_bytes_per_reasoner_token(dims)
    assert saved_bytes_per_layer(action_model, kw)[1:] == [predicted] * (dims.layers - 1)
    est = estimate_activations(spec.transformer, frames, height, width, rank=RANK, text_tokens=text, compiled=False,
                               action_steps=steps)
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


def test_the_plan_reads_the_caption_length_it_is_given():
    """A forward-dynamics step's caption (a few hundred tokens) is not the model's assumed length: the planner counts
    the length it is told, and only that changes."""
    from worldtune.models.memory import plan

    spec, cfg = get_spec("cosmos3-edge"), get_spec("cosmos3-edge").transformer

    def activations(**kw) -> float:
        p = plan(spec, "lora", 17, 480, 832, batch=4, lora_rank=16, grad_checkpointing="off", **kw)
        return next(line.gib for line in p.lines if line.item.startswith("activations: 28 blocks stored"))

    for text in (300, 2000):
        expected = 28 * estimate_activations(cfg, 17, 480, 832, 4, rank=16, text_tokens=text).per_block_full / 2**30
        assert activations(text_tokens=text) == pytest.approx(expected)
    assert activations(text_tokens=300) < activations() < activations(text_tokens=2000)
