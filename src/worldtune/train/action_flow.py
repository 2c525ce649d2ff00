"""The action half of the flow-matching objective: which tokens of an action run are denoised, the noised
action chunk, and its loss.

An action-conditioned world model runs in modes that differ only in which tokens are clean (NVIDIA's
cosmos-framework builds them in `build_sequence_plan_from_mode`; diffusers' `Cosmos3OmniPipeline` samples the
same three):

| mode | video latent frames | action chunk |
|---|---|---|
| forward_dynamics | first clean, the rest denoised | clean (conditioning) |
| inverse_dynamics | all clean (conditioning) | denoised |
| policy | first clean, the rest denoised | denoised |

A training task is one mode, or `joint`: one of the three per clip, uniformly (NVIDIA's "joint" mode, the
default of its robot action datasets) or as `train.dynamics.mode_weights` weighs them. The video half (noise, timestep, loss on the noisy frames) is
`FlowMatchingLoss`; this module adds the chunk: the same sigma as the clip's video draw (NVIDIA shares the
vision sigma with the actions unless `independent_action_schedule` is set, which its Cosmos 3 configs do not),
x_t = sigma * n + (1 - sigma) * a on the domain's raw width, target n - a, and the squared error averaged over
the chunk's steps and raw channels. A sample whose chunk is clean contributes zero.

Every draw comes from a CPU generator seeded by the sample's seed (a stream of its own, so the video draws of a
forward-dynamics run are unchanged): the same sample gets the same mode and noise on any device, in any batch,
after any resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

# mode -> (video frames after the first denoised, action chunk denoised)
MODES: dict[str, tuple[bool, bool]] = {
    "forward_dynamics": (True, False),
    "inverse_dynamics": (False, True),
    "policy": (True, True),
}
TASK_MODES: dict[str, tuple[str, ...]] = {
    "forward_dynamics": ("forward_dynamics",),
    "inverse_dynamics": ("inverse_dynamics",),
    "joint": ("forward_dynamics", "inverse_dynamics", "policy"),
}
_MODE_STREAM = 0x5EED_0A11  # seed offsets of the mode draw and the action noise (disjoint from the video draw)
_NOISE_STREAM = 0x5EED_0AC7


def task_modes(task: str | None) -> tuple[str, ...]:
    """The modes a training task draws from (an adapter's recorded task; none recorded = forward dynamics,
    the only action task there was before inverse dynamics)."""
    return TASK_MODES[task or "forward_dynamics"]


def predicts_actions(task: str | None) -> bool:
    """Whether the task denoises actions, i.e. trains the action output projection."""
    return any(MODES[m][1] for m in task_modes(task))


def clean_frames(mode: str, latent_frames: int) -> int:
    """Clean leading latent frames of a sample in `mode`: the first only, or all of them."""
    return 1 if MODES[mode][0] else latent_frames


def draw_modes(modes: tuple[str, ...], seeds: list[int], weights: Mapping[str, float] | None = None) -> list[str]:
    """Each sample's mode: the task's only one, or one of them from the sample's seed, uniformly or in proportion
    to `weights` (modes it does not name get none)."""
    if len(modes) == 1:
        return [modes[0]] * len(seeds)
    if not weights:
        return [modes[int(torch.randint(len(modes), (), generator=torch.Generator().manual_seed(s ^ _MODE_STREAM)))]
                for s in seeds]
    cumulative = torch.tensor([weights.get(m, 0.0) for m in modes], dtype=torch.float64).cumsum(0)
    draws = [float(torch.rand((), generator=torch.Generator().manual_seed(s ^ _MODE_STREAM), dtype=torch.float64))
             for s in seeds]
    return [modes[min(int(torch.searchsorted(cumulative, u * cumulative[-1], right=True)), len(modes) - 1)]
            for u in draws]


@dataclass(frozen=True)
class ActionBatch:
    """The action chunks of a batch as one transformer call per sample reads them, and their targets."""

    x_t: torch.Tensor  # [B, K, D] the chunk, noised where it is denoised (raw width D)
    target: torch.Tensor  # [B, K, D] velocity n - a (zeros where the chunk is clean)
    noisy: torch.Tensor  # [B] 1 where the chunk is denoised
    sigma: torch.Tensor  # [B] its noise level (the video draw's)
    modes: tuple[str, ...]


def prepare_actions(actions: torch.Tensor, seeds: list[int], sigma: torch.Tensor, modes: list[str]) -> ActionBatch:
    """Noise the chunks [B, K, D] of the samples whose mode denoises them, at the video draw's `sigma` [B]."""
    a = actions.float()
    noise = torch.zeros_like(a)
    for i, (s, m) in enumerate(zip(seeds, modes)):
        if MODES[m][1]:
            noise[i] = torch.randn(a.shape[1:], generator=torch.Generator().manual_seed(s ^ _NOISE_STREAM)).to(a.device)
    noisy = torch.tensor([float(MODES[m][1]) for m in modes], device=a.device)
    s3 = sigma.to(a.device, torch.float32).view(-1, 1, 1)
    n3 = noisy.view(-1, 1, 1)
    x_t = n3 * (s3 * noise + (1 - s3) * a) + (1 - n3) * a
    return ActionBatch(x_t=x_t, target=n3 * (noise - a), noisy=noisy, sigma=sigma.float(), modes=tuple(modes))


def action_loss(pred: torch.Tensor, batch: ActionBatch) -> torch.Tensor:
    """Mean squared velocity error over each denoised chunk's steps and raw channels, averaged per sample over
    the batch (a clean chunk counts as zero, as a clip without noisy frames does in the video loss)."""
    per_sample = ((pred.float() - batch.target) ** 2).flatten(1).mean(1) * batch.noisy
    return per_sample.mean()
