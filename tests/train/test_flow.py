import math

import torch

from worldtune.train.flow import FlowMatchingLoss, sample_seed
from worldtune.train.schedule import lr_multiplier


def test_flow_batch_matches_independent_computation():
    obj = FlowMatchingLoss(shift=5.0, cond_timestep=1e-4)
    x0 = torch.randn(2, 4, 5, 3, 3, generator=torch.Generator().manual_seed(1))
    seeds = [11, 12]
    fb = obj.prepare(x0, seeds, sigma=[0.3, 0.8], num_cond=[0, 2])
    # independent: redo the noise draw from each sample's generator
    for i, s in enumerate(seeds):
        n = torch.randn(4, 5, 3, 3, generator=torch.Generator().manual_seed(s))
        sig = [0.3, 0.8][i]
        k = [0, 2][i]
        expect = sig * n + (1 - sig) * x0[i]
        expect[:, :k] = x0[i, :, :k]
        assert torch.allclose(fb.x_t[i], expect, atol=1e-6)
        assert torch.allclose(fb.target[i], n - x0[i], atol=1e-6)
        ts = fb.timestep[i, 0, :, 0, 0]
        assert torch.allclose(ts[:k], torch.full((k,), 1e-4))
        assert torch.allclose(ts[k:], torch.full((5 - k,), sig))
        assert fb.condition_mask[i, 0, :, 0, 0].tolist() == [1.0] * k + [0.0] * (5 - k)
    pred = torch.randn_like(x0)
    loss = FlowMatchingLoss.loss(pred, fb)
    per = []
    for i, k in enumerate([0, 2]):
        per.append(((pred[i, :, k:] - fb.target[i, :, k:]) ** 2).mean())
    assert torch.allclose(loss, torch.stack(per).mean(), atol=1e-6)


def test_sigma_is_shifted_logit_normal():
    obj = FlowMatchingLoss(shift=5.0, text_dropout=0.0)
    x0 = torch.zeros(1, 1, 3, 1, 1)
    sig = torch.tensor([float(obj.prepare(x0, [sample_seed(0, 0, i)]).sigma) for i in range(2000)])
    t = sig / (5 - 4 * sig)  # inverse of sigma = 5t / (1 + 4t)
    u = torch.log(t / (1 - t))
    assert abs(float(u.mean())) < 0.1 and abs(float(u.std()) - 1.0) < 0.1
    assert float(sig.median()) > 0.75  # the shift pushes training towards high noise


def test_cond_frames_and_text_dropout_frequencies():
    obj = FlowMatchingLoss(text_dropout=0.2)
    x0 = torch.zeros(1, 1, 5, 1, 1)
    draws = [obj.prepare(x0, [sample_seed(3, 1, i)]) for i in range(2000)]
    ks = torch.tensor([int(d.num_cond) for d in draws])
    keep = torch.tensor([float(d.text_keep) for d in draws])
    assert abs(float((ks == 0).float().mean()) - 0.5) < 0.05
    assert abs(float((ks == 2).float().mean()) - 0.25) < 0.05
    assert abs(float(keep.mean()) - 0.8) < 0.04


def test_lr_schedule_warmup_then_linear_decay():
    m = [lr_multiplier(s, 100, 10, 0.5, 0.2) for s in range(100)]
    assert math.isclose(m[0], 0.05) and math.isclose(m[9], 0.5)
    assert math.isclose(m[10], 0.5) and m[99] < m[50] < m[10]
    assert math.isclose(lr_multiplier(100, 100, 10, 0.5, 0.2), 0.2)
