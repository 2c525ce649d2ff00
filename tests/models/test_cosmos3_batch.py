"""Samples sharing one Cosmos 3 call give what one call per sample gives: outputs and gradients."""

import pytest
import torch

from worldtune.models.cosmos3_actions import action_run_inputs
from worldtune.models.cosmos3_batch import _BATCHES, call_grouped, install, merge_inputs
from worldtune.models.cosmos3_pipeline import transformer_inputs
from worldtune.models.load import load_transformer


@pytest.fixture(scope="module")
def transformer():
    model, _ = load_transformer("tiny-cosmos3", None, seed=0, random_weights=True)
    return model.float()


def _samples(config, with_actions: bool) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    kws = []
    # two prompt lengths, two clean-frame counts, clean and denoised chunks: three groups of shapes
    for i, (length, clean, noisy) in enumerate([(40, 1, True), (40, 1, False), (40, 5, True), (31, 1, True),
                                                (31, 1, False), (40, 1, True)]):
        ids = torch.randint(5, 250, (length,), generator=g)
        x = torch.randn(1, 48, 5, 4, 7, generator=g)
        sigma = torch.rand(5, generator=g)
        if with_actions:
            acts = torch.randn(16, 7, generator=g)
            kws.append(action_run_inputs(config, ids, x, sigma, acts, 0, 15.0, clean_frames=clean,
                                         action_sigma=torch.rand(1, generator=g)[0] if noisy else None))
        else:
            kws.append(transformer_inputs(config, ids, x, sigma, num_cond=clean, fps=15.0))
    return kws


def _run(model, kws, grouped: bool):
    model.zero_grad(set_to_none=True)
    outs = call_grouped(model, kws) if grouped else [model(**k) for k in kws]
    videos = [o[0] if grouped else o[0][0] for o in outs]
    actions = [o[2] if grouped else (o[2][0] if o[2] is not None else None) for o in outs]
    loss = sum((v.float() ** 2).mean() * (i + 1) for i, v in enumerate(videos))
    loss = loss + sum((a.float() ** 2).mean() for a in actions if a is not None)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return videos, actions, grads


@pytest.mark.parametrize("with_actions", [True, False])
def test_grouped_call_equals_one_call_per_sample(transformer, with_actions):
    install(transformer)
    kws = _samples(transformer.config, with_actions)
    shapes = {(k["und_len"], k["sequence_length"]) for k in kws}
    assert 1 < len(shapes) < len(kws)  # the batch does group, and into more than one call
    v1, a1, g1 = _run(transformer, kws, grouped=False)
    v2, a2, g2 = _run(transformer, kws, grouped=True)
    for x, y in zip(v1, v2):
        torch.testing.assert_close(y, x, atol=2e-5, rtol=1e-4)
    for x, y in zip(a1, a2):
        if x is not None:
            torch.testing.assert_close(y, x, atol=2e-5, rtol=1e-4)
    assert set(g1) == set(g2)
    for n in g1:
        torch.testing.assert_close(g2[n], g1[n], atol=1e-5, rtol=1e-4, msg=n)


def test_grouped_call_under_activation_checkpointing(transformer):
    """The recomputed layers during backward attend per sample too (the batch is read from the buffer's shape)."""
    install(transformer)
    kws = _samples(transformer.config, True)
    _, _, g1 = _run(transformer, kws, grouped=False)
    transformer.enable_gradient_checkpointing()
    try:
        _, _, g2 = _run(transformer, kws, grouped=True)
    finally:
        transformer.disable_gradient_checkpointing()
    for n in g1:
        torch.testing.assert_close(g2[n], g1[n], atol=1e-5, rtol=1e-4, msg=n)


def test_stock_attention_mixes_samples(transformer):
    """The check above can fail: the stock processor on a merged buffer attends across samples."""
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3AttnProcessor

    samples = _samples(transformer.config, True)
    kws = [samples[0], samples[5]]  # one sequence shape, different contents
    single = [transformer(**k)[0][0] for k in kws]
    _BATCHES.clear()
    merged = merge_inputs(kws)
    procs = {m: m.processor for m in transformer.modules() if hasattr(m, "processor")}
    try:
        for m in procs:
            m.processor = Cosmos3AttnProcessor()
        stock = transformer(**merged)[0]
    finally:
        for m, p in procs.items():
            m.processor = p
    assert not torch.allclose(stock[1], single[1], atol=1e-3)
