"""Cosmos 3 action runs on `tiny-cosmos3`: the training prediction is the pipeline's own transformer call in a
`forward_dynamics` and an `inverse_dynamics` run, and a LoRA step with the domain's projection rows changes only
those weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from worldtune.config import LoraConfig
from worldtune.errors import ConfigError
from worldtune.models import cosmos3_domains as domains
from worldtune.models.cosmos3_actions import (
    INPUT_TABLES,
    action_canvas,
    action_prompt_token_ids,
    domain_rows_state,
    merge_domain_rows,
    predict_dynamics,
    predict_forward_dynamics,
    register_domain,
    train_domain_rows,
)
from worldtune.models.family import family_of
from worldtune.models.registry import get_spec
from worldtune.train.adapters import apply_training_mode
from worldtune.train.flow import FlowBatch, FlowMatchingLoss

CHUNK, HEIGHT, WIDTH, FPS, TIER = 8, 64, 112, 15.0, 256  # 9 frames: 3 latent frames of 4 x 7
TASK = "Put the red cube on the blue one."
DROID = domains.DOMAIN_IDS["droid_lerobot"]


@pytest.fixture(scope="module")
def model_dir(tiny_cosmos3_dir):
    return tiny_cosmos3_dir


@pytest.fixture(scope="module")
def pipe(model_dir):
    from diffusers import Cosmos3OmniPipeline

    return Cosmos3OmniPipeline.from_pretrained(model_dir)


def _fd_run(pipe, actions: torch.Tensor | None, domain: str, steps: int = 2, mode: str = "forward_dynamics"):
    """A plain-diffusers action run (forward dynamics from `actions`, or inverse dynamics of a random video);
    returns every transformer call's (kwargs, output)."""
    from diffusers import CosmosActionCondition

    frames = np.random.RandomState(0).randint(0, 255, (CHUNK + 1, HEIGHT, WIDTH, 3), dtype=np.uint8)
    inputs = (dict(raw_actions=actions, image=Image.fromarray(frames[0])) if mode == "forward_dynamics" else
              dict(video=[Image.fromarray(f) for f in frames]))
    calls = []
    handle = pipe.transformer.register_forward_hook(lambda m, a, kw, out: calls.append((kw, out)), with_kwargs=True)
    try:
        pipe(TASK, action=CosmosActionCondition(mode=mode, chunk_size=CHUNK, domain_name=domain,
                                                resolution_tier=TIER, **inputs),
             fps=FPS, num_inference_steps=steps, guidance_scale=1.0, output_type="latent",
             generator=torch.Generator().manual_seed(0))
    finally:
        handle.remove()
    return calls


def _same_call(ours: dict, ref: dict) -> None:
    """Every keyword argument worldtune builds equals the pipeline's (tensors bit for bit)."""
    assert set(ours) <= set(ref)
    for k, v in ours.items():
        r = ref[k]
        if isinstance(v, list):
            assert len(v) == len(r) and all(torch.equal(a, b) if torch.is_tensor(a) else a == b for a, b in zip(v, r)), k
        else:
            assert (torch.equal(v, r) if torch.is_tensor(v) else v == r), k


def _batch(x_t: torch.Tensor, sigma: float) -> FlowBatch:
    t = x_t.shape[2]
    cond = (torch.arange(t) < 1).float().view(1, 1, t, 1, 1)
    return FlowBatch(x_t=x_t, target=torch.zeros_like(x_t), timestep=cond * 1e-4 + (1 - cond) * sigma,
                     condition_mask=cond.expand(1, 1, t, *x_t.shape[3:]), loss_mask=1 - cond, text_keep=torch.ones(1),
                     sigma=torch.tensor([sigma]), num_cond=torch.tensor([1]))


def test_domain_table_is_diffusers_table():
    from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as p

    assert domains.DOMAIN_IDS == p._EMBODIMENT_TO_DOMAIN_ID and domains.RAW_WIDTHS == p._EMBODIMENT_TO_RAW_ACTION_DIM
    free = domains.free_domain_ids()
    assert free[0] == 31 and not set(free) & (set(p._EMBODIMENT_TO_DOMAIN_ID.values()) | domains.NVIDIA_ONLY_IDS)


def test_training_prediction_is_the_pipeline_forward_dynamics_call(pipe):
    """Token ids, sequence, rotary positions, action tokens and domain rebuilt by worldtune give the pipeline's
    own transformer call bit for bit, and the prediction depends on the actions."""
    actions = torch.randn(CHUNK, 10, generator=torch.Generator().manual_seed(1))
    kw, out = _fd_run(pipe, actions, "droid_lerobot")[1]  # the second step: a sigma inside (0, 1)
    x_t = kw["vision_tokens"][0]
    sigma = float(kw["vision_timesteps"][0]) / 1000
    canvas = action_canvas(HEIGHT, WIDTH, TIER)
    ids, empty = action_prompt_token_ids(pipe, TASK, CHUNK, *canvas, FPS)
    assert ids == kw["input_ids"].tolist()
    # the dropped text is the family's empty caption without metadata (what video training drops to)
    assert empty == pipe.tokenize_prompt("", add_resolution_template=False, add_duration_template=False)[0]
    text = torch.full((1, 2, max(len(ids), len(empty))), -1, dtype=torch.long)
    text[0, 0, :len(ids)], text[0, 1, :len(empty)] = torch.tensor(ids), torch.tensor(empty)

    calls = []
    handle = pipe.transformer.register_forward_hook(lambda m, a, k, o: calls.append((k, o)), with_kwargs=True)
    try:
        with torch.no_grad():
            pred = predict_forward_dynamics(pipe.transformer, _batch(x_t, sigma), text, actions[None],
                                            torch.tensor([DROID]), torch.float32, FPS)
            other = predict_forward_dynamics(pipe.transformer, _batch(x_t, sigma), text, -actions[None],
                                             torch.tensor([DROID]), torch.float32, FPS)
    finally:
        handle.remove()
    ours = calls[0][0]
    assert set(ours) <= set(kw) and ours["action_timesteps"].numel() == kw["action_timesteps"].numel() == 0
    for k, v in ours.items():
        if k == "action_timesteps":
            continue
        ref = kw[k]
        if isinstance(v, list):
            assert len(v) == len(ref) and all(torch.equal(a, b) if torch.is_tensor(a) else a == b
                                              for a, b in zip(v, ref)), k
        else:
            assert (torch.equal(v, ref) if torch.is_tensor(v) else v == ref), k
    assert torch.equal(pred, out[0][0])
    assert pred[:, :, 0].abs().sum() == 0 and not torch.equal(pred, other)  # first frame clean; actions matter


def test_training_prediction_is_the_pipeline_inverse_dynamics_call(pipe):
    """Inverse dynamics: every latent frame clean, each action step a noisy token at the step's timestep; the
    training sequence is the pipeline's transformer call bit for bit and the action velocity its output, cropped
    to the domain's raw width; the prediction depends on the video."""
    from worldtune.train.action_flow import ActionBatch

    kw, out = _fd_run(pipe, None, "droid_lerobot", steps=1, mode="inverse_dynamics")[0]
    x0 = kw["vision_tokens"][0]
    t = x0.shape[2]
    sigma = float(kw["action_timesteps"][0]) / 1000
    assert kw["vision_timesteps"].numel() == 0 and 0 < sigma < 1  # the video only conditions
    noisy = kw["action_tokens"][0]
    assert noisy.shape == (CHUNK, pipe.transformer.config.action_dim) and noisy[:, 10:].abs().sum() == 0
    ids, empty = action_prompt_token_ids(pipe, TASK, CHUNK, *action_canvas(HEIGHT, WIDTH, TIER), FPS)
    text = torch.full((1, 2, max(len(ids), len(empty))), -1, dtype=torch.long)
    text[0, 0, :len(ids)], text[0, 1, :len(empty)] = torch.tensor(ids), torch.tensor(empty)
    clean = torch.ones(1, 1, t, 1, 1)
    video = FlowBatch(x_t=x0, target=torch.zeros_like(x0), timestep=clean * 1e-4,
                      condition_mask=clean.expand(1, 1, t, *x0.shape[3:]), loss_mask=1 - clean, text_keep=torch.ones(1),
                      sigma=torch.tensor([sigma]), num_cond=torch.tensor([t]))
    chunk = ActionBatch(x_t=noisy[None, :, :10], target=torch.zeros(1, CHUNK, 10), noisy=torch.ones(1),
                        sigma=torch.tensor([sigma]), modes=("inverse_dynamics",))
    calls = []
    handle = pipe.transformer.register_forward_hook(lambda m, a, k, o: calls.append(k), with_kwargs=True)
    try:
        with torch.no_grad():
            v, a = predict_dynamics(pipe.transformer, video, text, chunk, torch.tensor([DROID]), torch.float32, FPS)
            other = predict_dynamics(pipe.transformer, FlowBatch(**{**video.__dict__, "x_t": x0.flip(2)}), text, chunk,
                                     torch.tensor([DROID]), torch.float32, FPS)[1]
    finally:
        handle.remove()
    _same_call(calls[0], kw)
    assert v.abs().sum() == 0 and a.shape == (1, CHUNK, 10)
    assert torch.equal(a[0], out[2][0][:, :10])  # the pipeline reads the raw width only (it masks the rest)
    assert not torch.equal(a, other)  # the actions are read from the frames


def test_new_domain_runs_in_the_pipeline_once_registered(pipe, monkeypatch):
    from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as p

    for table in ("_EMBODIMENT_TO_DOMAIN_ID", "_EMBODIMENT_TO_RAW_ACTION_DIM"):  # registered for this test only
        monkeypatch.setattr(p, table, dict(getattr(p, table)))
    new = domains.resolve_domain(None, None, 4, "gantry", "info.json")
    assert (new.id, new.width, new.new) == (31, 4, True)
    register_domain(new)
    kw, _ = _fd_run(pipe, torch.randn(CHUNK, 4), new.name, steps=1)[0]
    assert int(kw["action_domain_ids"][0]) == 31 and kw["action_tokens"][0][:, 4:].abs().sum() == 0


def test_lora_step_changes_only_adapters_and_the_domain_rows(model_dir, pipe):
    from diffusers import Cosmos3OmniTransformer

    tr = Cosmos3OmniTransformer.from_pretrained(model_dir, subfolder="transformer")
    tables = {n: tr.get_submodule(n).weight.detach().clone() for n in INPUT_TABLES}
    params = apply_training_mode(tr, "lora", LoraConfig(rank=4, alpha=8.0), family_of(get_spec("tiny-cosmos3")))
    rows = train_domain_rows(tr, DROID)
    with pytest.raises(ConfigError, match="one domain per run"):
        train_domain_rows(tr, 3)
    before = {n: p.detach().clone() for n, p in tr.named_parameters()}
    ids, empty = action_prompt_token_ids(pipe, TASK, CHUNK, *action_canvas(HEIGHT, WIDTH, TIER), FPS)
    text = torch.full((2, 2, max(len(ids), len(empty))), -1, dtype=torch.long)
    text[:, 0, :len(ids)], text[:, 1, :len(empty)] = torch.tensor(ids), torch.tensor(empty)
    objective = FlowMatchingLoss(cond_frames_probs=((1, 1.0),), text_dropout=0.0)
    gen = torch.Generator().manual_seed(0)
    batch = objective.prepare(torch.randn(2, 48, 3, 4, 7, generator=gen), [0, 1])
    actions, domain_ids = torch.randn(2, CHUNK, 10, generator=gen), torch.tensor([DROID, DROID])
    opt = torch.optim.AdamW(params + rows, lr=1e-2, weight_decay=0.1)  # decay must not reach other domains' rows
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = objective.loss(predict_forward_dynamics(tr, batch, text, actions, domain_ids, torch.float32, FPS), batch)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    changed = {n for n, p in tr.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n or n.endswith("parametrizations.weight.0.row") for n in changed)
    assert sum(n.endswith(".row") for n in changed) == 2  # the input projection's weight and bias rows
    state = domain_rows_state(tr)
    merge_domain_rows(tr)
    for name, old in tables.items():
        new = tr.get_submodule(name).weight
        others = torch.arange(len(old)) != DROID
        assert torch.equal(new[others], old[others]) and not torch.equal(new[DROID], old[DROID]), name
        assert torch.equal(new[DROID:DROID + 1], state[f"{name}.weight"]), name
    assert "action_proj_in.fc.weight" in tr.state_dict()  # plain diffusers layout again
