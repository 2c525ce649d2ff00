"""worldtune's forward-dynamics chunk sampler (models/cosmos3_rollout.py, what `worldtune serve` runs) on
`tiny-cosmos3`: a chunk equals the plain pipeline call's; chunks of several rollouts generated in one transformer call
per step equal their lone calls (each rollout's noise is its own); the fixed buffers are refilled at every call; and a
transformer call makes no host synchronisation (which a CUDA graph could not record)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from tests.infer.conftest import random_frames
from worldtune.errors import ConfigError
from worldtune.infer.dynamics import forward_dynamics
from worldtune.models.action_dynamics import ChunkRequest
from worldtune.models.cosmos3_domains import ActionDomain
from worldtune.models.family import pipeline_dynamics

H, W, K, FPS, TIER, STEPS = 64, 112, 8, 15.0, 256, 2
TASK = "Put the red cube on the blue one."
DROID = ActionDomain("droid_lerobot", 8, 10, new=False)


@pytest.fixture(scope="module")
def pipe(tiny_cosmos3_dir):
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def sampler(pipe):
    return pipeline_dynamics(pipe).chunk_sampler(pipe, fast=True, cuda_graphs=False, compile=False)


def _request(seed: int, guidance: float = 3.0, task: str = TASK) -> ChunkRequest:
    frame = random_frames(1, H, W, seed=seed)[0]
    actions = np.random.default_rng(seed).uniform(-1, 1, (K, 10)).astype(np.float32)
    return ChunkRequest(frame, actions, DROID, task, seed, STEPS, guidance, TIER, "ego_view", FPS)


def _plain(pipe, r: ChunkRequest) -> np.ndarray:
    return forward_dynamics(pipe, r.first_frame, r.actions, r.domain, r.task, seed=r.seed, steps=r.steps,
                            guidance=r.guidance, tier=r.tier, view_point=r.view_point, fps=r.fps)


def _close(a: np.ndarray, b: np.ndarray) -> None:
    """Equal uint8 frames up to one level of rounding (batched attention sums in another order)."""
    assert a.shape == b.shape
    assert np.abs(a.astype(np.int16) - b).max() <= 1


class _Calls:
    """Counts transformer calls."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.n = 0
        self.handle = module.register_forward_pre_hook(lambda *_: setattr(self, "n", self.n + 1))


@pytest.mark.parametrize("guidance", [3.0, 1.0])
def test_a_chunk_equals_the_plain_pipeline_call(pipe, sampler, one_thread, guidance):
    r = _request(5, guidance)
    (ours,) = sampler.run([r])
    assert ours.dtype == np.uint8 and ours.shape == (K + 1, H, W, 3)
    np.testing.assert_array_equal(ours, _plain(pipe, r))


def test_rollouts_batched_into_one_call_get_what_a_lone_call_gives(pipe, sampler, one_thread):
    """Three rollouts of one task share each step's calls; a fourth with a longer task (another sequence length)
    gets calls of its own. Every chunk equals the plain call with its own seed: no rollout's noise depends on the
    others in the batch."""
    requests = [_request(s) for s in (1, 2, 3)] + [_request(4, task=TASK + " Then lift the bowl slowly.")]
    calls = _Calls(pipe.transformer)
    try:
        batched = sampler.run(requests)
    finally:
        calls.handle.remove()
    # per step: the prompt branch in two calls (two prompt lengths), the dropped-text branch (one empty caption for
    # every rollout, so one length) in one
    assert calls.n == STEPS * 3
    for r, video in zip(requests, batched):
        _close(video, _plain(pipe, r))
    assert not np.array_equal(batched[0], batched[1])


def test_the_fixed_buffers_are_refilled_at_every_call(pipe, sampler, one_thread):
    """Two chunks of one shape one after the other reuse one set of buffers: the second is its own, not the first's
    inputs replayed."""
    a, b = _request(7), _request(8)
    first, second = sampler.run([a])[0], sampler.run([b])[0]
    np.testing.assert_array_equal(first, _plain(pipe, a))
    np.testing.assert_array_equal(second, _plain(pipe, b))


class _NoHostSync(TorchFunctionMode):
    """Fails on what reads a device value back to the host inside a transformer call."""

    SYNCS = ("__bool__", "item", "tolist", "nonzero", "numpy", "cpu", "__int__", "__float__")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.SYNCS:
            raise AssertionError(f"host synchronisation in a transformer call: {name}")
        return func(*args, **(kwargs or {}))


def test_a_transformer_call_makes_no_host_synchronisation(pipe, one_thread):
    """What the CUDA-graph capture needs, checked on the CPU: the transformer call the sampler makes reads nothing
    back from the device (the action projections' range check would: it runs unchecked there)."""
    sampler = pipeline_dynamics(pipe).chunk_sampler(pipe, fast=True, cuda_graphs=False, compile=False)
    fn = sampler.call.fn

    def watched(**kw):
        with _NoHostSync():
            return fn(**kw)

    sampler.call.fn = watched
    (video,) = sampler.run([_request(9)])
    assert video.shape == (K + 1, H, W, 3)


def test_cuda_graphs_off_cuda_is_a_one_line_error(pipe):
    with pytest.raises(ConfigError, match="cuda_graphs needs a CUDA device"):
        pipeline_dynamics(pipe).chunk_sampler(pipe, fast=True, cuda_graphs=True, compile=False)


def test_a_compiling_sampler_lets_every_batch_shape_compile(tiny_cosmos3_dir):
    """Each batch size and guidance branch is its own packed shape: with dynamo's default limit of 8 recompilations,
    a server whose clients step in several batch sizes fell back to eager layers (seen on an H200: the 4-rollout
    batch at guidance 6 ran eager after 8 shapes). Building a compiling sampler raises the limit."""
    import torch

    from worldtune.models.cosmos3_rollout import RECOMPILE_LIMIT
    from worldtune.models.load import load_pipeline

    # dynamo's own patch: pytest's monkeypatch would delete the setting on undo (torch's config module hides it then)
    with torch._dynamo.config.patch(recompile_limit=8):
        fresh, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")  # compiled in place: not the module's pipeline
        pipeline_dynamics(fresh).chunk_sampler(fresh, fast=True, cuda_graphs=False, compile=False)
        assert torch._dynamo.config.recompile_limit == 8
        pipeline_dynamics(fresh).chunk_sampler(fresh, fast=True, cuda_graphs=False, compile=True)
        assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT >= 2 * 8  # serve.max_batch's default x 2


def test_serve_fp8_runs_the_blocks_in_fp8_near_the_bf16_chunk(tiny_cosmos3_dir, one_thread, float8_on_cpu):
    """serve.fp8 quantises the blocks' linears before the sampler is built (so graphs and compiled layers see the
    float8 ones); its chunk differs from the full-precision one, by a few levels (torchao's float8 on the CPU: see
    the `float8_on_cpu` fixture)."""
    from torchao.quantization import Float8Tensor

    from worldtune.config import load_config
    from worldtune.models.load import load_pipeline
    from worldtune.serve.world import chunk_sampler

    low, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")
    low.set_progress_bar_config(disable=True)
    full = pipeline_dynamics(low).chunk_sampler(low, fast=True, cuda_graphs=False, compile=False)
    r = _request(7)
    (ref,) = full.run([r])
    sampler = chunk_sampler(low, load_config(None, ["--serve.fp8", "true", "--serve.device", "cpu"]).serve)
    assert sum(isinstance(getattr(m, "weight", None), Float8Tensor) for m in low.transformer.modules()) > 0
    (ours,) = sampler.run([r])
    diff = np.abs(ours.astype(np.int16) - ref)
    assert 0 < diff.mean() < 3.0
