"""Cosmos 3 forward-dynamics chunks of several rollouts at once, on fixed-shape buffers: what `worldtune serve`
runs per policy step.

`Cosmos3OmniPipeline.__call__(action=CosmosActionCondition("forward_dynamics"))` is rebuilt here in three parts, each
with the pipeline's own methods, so a chunk equals the plain call's to floating-point tolerance
(tests/infer/test_chunk_sampler.py):

1. `prepare_chunk`: tokenize the action caption, VAE-encode the first frame (only it: `encode_leading_frames`),
   draw the initial noise from the request's own CPU generator seeded with its seed, pack the static sequence of
   both guidance branches, and give the chunk its own scheduler. Nothing is shared between requests, so putting a
   rollout in a batch never changes the noise it gets;
2. `Cosmos3ChunkSampler.run`: the pipeline's denoising loop for every request at once. Per step and guidance branch,
   requests whose packed sequences have one shape share one transformer call (models/cosmos3_batch.py), made by a
   `StaticCall` (models/static_call.py): fixed buffers, and on CUDA one CUDA graph per shape. What the pipeline
   reads back from the device at every step (`t.item()`, `mask.sum() > 0`) is known on the host beforehand here,
   and the action projections skip their per-call range check of the domain id (done once, in `prepare_chunk`), so
   a transformer call makes no host synchronisation, which a graph could not record;
3. decode each chunk straight to uint8 frames on the device (`frames.decode_to_frames`).
"""

from __future__ import annotations

import copy
import types
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from worldtune.errors import ConfigError
from worldtune.models.action_dynamics import ChunkRequest, ChunkSampler
from worldtune.models.cosmos3_pipeline import action_condition, encode_leading_frames

MODE = "forward_dynamics"


@dataclass
class PreparedChunk:
    """One request's state through the loop: its latents, the static kwargs of each guidance branch, its scheduler."""

    request: ChunkRequest
    latents: torch.Tensor  # [1, C, T, h, w] float32, updated every step
    action_latents: torch.Tensor  # [K, action_dim] float32, clean (forward dynamics denoises no action)
    branches: dict[str, dict[str, Any]]  # "cond" / "uncond" -> the transformer's static keyword arguments
    condition_mask: torch.Tensor  # [T, 1, 1]: 1 on clean latent frames
    any_noisy: bool  # the pipeline's `noisy_mask.sum() > 0`, read once
    noisy_vision_tokens: int
    noisy_action_tokens: int
    scheduler: Any
    timesteps_host: torch.Tensor  # the scheduler's timesteps on the CPU (read without a device round trip)
    dtype: torch.dtype
    device: torch.device

    def kwargs(self, branch: str, timestep: float | int) -> dict[str, Any]:
        """The transformer's keyword arguments of one branch at one step, as the pipeline's loop builds them."""
        kw = dict(self.branches[branch])
        kw["vision_tokens"] = [self.latents.to(device=self.device, dtype=self.dtype)]
        kw["vision_timesteps"] = torch.full((self.noisy_vision_tokens,), timestep, device=self.device)
        kw["action_tokens"] = [self.action_latents.to(device=self.device, dtype=self.dtype)]
        kw["action_timesteps"] = torch.full((self.noisy_action_tokens,), timestep, device=self.device)
        return kw

    def masked(self, pred: torch.Tensor) -> torch.Tensor:
        """The pipeline's `_mask_velocity_predictions` for the video: zero on the clean frames."""
        if not self.any_noisy:
            return torch.zeros_like(pred)
        return pred * (1.0 - self.condition_mask).to(dtype=pred.dtype, device=pred.device)

    def step(self, t: torch.Tensor, cond: torch.Tensor, uncond: torch.Tensor | None) -> None:
        """Guidance and one scheduler step on this chunk's latents."""
        v = self.masked(cond).float()
        if uncond is not None:
            u = self.masked(uncond).float()
            v = u + self.request.guidance * (v - u)
        self.latents = self.scheduler.step(v.unsqueeze(0), t, self.latents.unsqueeze(0), return_dict=False)[0].squeeze(0)


def _packed_branch(pipe, text: dict[str, Any], latents: torch.Tensor, action_latents: torch.Tensor,
                   vision_cond: list[int], action_cond: list[int], domain_id: torch.Tensor, fps: float,
                   device: torch.device) -> tuple[dict[str, Any], int, int]:
    """(static keyword arguments, noisy vision tokens, noisy action tokens) of one guidance branch: the pipeline's
    step 5 (`cond_packed_static` / `uncond_packed_static`), without sound."""
    vision = pipe._prepare_vision_segment(
        input_vision_tokens=latents, has_image_condition=bool(vision_cond),
        mrope_offset=text["vision_start_temporal_offset"], vision_fps=fps, curr=text["und_len"], device=device,
        condition_frame_indexes=vision_cond)
    action = pipe._prepare_action_segment(
        input_action_tokens=action_latents, condition_frame_indexes=action_cond,
        mrope_offset=text["vision_start_temporal_offset"], action_fps=fps,
        curr=text["und_len"] + vision["num_vision_tokens"], device=device)
    kw = dict(
        input_ids=text["input_ids"], text_indexes=text["text_indexes"],
        position_ids=torch.cat([text["text_mrope_ids"], vision["vision_mrope_ids"], action["action_mrope_ids"]], 1),
        und_len=text["und_len"], sequence_length=text["und_len"] + vision["num_vision_tokens"] + action["action_len"],
        vision_token_shapes=vision["vision_token_shapes"], vision_sequence_indexes=vision["vision_sequence_indexes"],
        vision_mse_loss_indexes=vision["vision_mse_loss_indexes"],
        vision_noisy_frame_indexes=vision["vision_noisy_frame_indexes"],
        action_token_shapes=action["action_token_shapes"], action_sequence_indexes=action["action_sequence_indexes"],
        action_mse_loss_indexes=action["action_mse_loss_indexes"],
        action_noisy_frame_indexes=action["action_noisy_frame_indexes"], action_domain_ids=[domain_id],
        return_dict=False)
    return kw, vision["num_noisy_vision_tokens"], action["num_noisy_action_tokens"]


def _scheduler(pipe, steps: int, device: torch.device):
    """A copy of the pipeline's scheduler with the pipeline's timesteps: each chunk steps its own (UniPC keeps the
    previous steps' outputs on the instance)."""
    scheduler = copy.deepcopy(pipe.scheduler)
    if pipe.config.use_native_flow_schedule:
        sigmas = np.linspace(1.0 - 1.0 / scheduler.config.num_train_timesteps, 0.0, steps + 1)[:-1]
        scheduler.set_timesteps(steps, device=device, sigmas=sigmas)
    else:
        scheduler.set_timesteps(steps, device=device)
    return scheduler


@torch.no_grad()
def prepare_chunk(pipe, r: ChunkRequest) -> PreparedChunk:
    """Steps 1-6 of the pipeline's `__call__` for one forward-dynamics request, its noise from a CPU generator
    seeded with `r.seed` (as `Cosmos3Dynamics.forward` passes it)."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _ACTION_RESOLUTION_BINS
    from diffusers.video_processor import VideoProcessor
    from PIL import Image

    condition = action_condition(MODE, len(r.actions), r.domain, r.tier, r.view_point,
                                 raw_actions=torch.tensor(np.asarray(r.actions)), image=Image.fromarray(r.first_frame))
    pipe.check_inputs(r.task, None, None, None, None, None, float(r.guidance), False, ["latents"], condition)
    num_frames, fps = condition.chunk_size + 1, float(r.fps)
    probe = pipe.video_processor.preprocess_video([condition.image])
    height, width = VideoProcessor.classify_height_width_bin(int(probe.shape[-2]), int(probe.shape[-1]),
                                                             ratios=_ACTION_RESOLUTION_BINS[str(r.tier)])
    device, dtype = pipe._get_execution_device(), pipe.transformer.dtype
    cond_ids, uncond_ids = pipe.tokenize_prompt(r.task, None, num_frames=num_frames, height=height, width=width,
                                                fps=fps, use_system_prompt=None, add_resolution_template=True,
                                                add_duration_template=True, action_mode=MODE,
                                                action_view_point=r.view_point)
    texts = {"cond": pipe._prepare_text_segment(cond_ids, device=device),
             "uncond": pipe._prepare_text_segment(uncond_ids, device=device)}
    with encode_leading_frames(pipe, 1):
        (latents, _, action_latents, fps_vision, _, vision_mask, _, _, domain_id, _, _,
         action_cond) = pipe.prepare_latents(
            num_frames=num_frames, height=height, width=width, fps=fps,
            generator=torch.Generator("cpu").manual_seed(int(r.seed)), device=device, dtype=torch.float32,
            action=condition)
    slots = pipe.transformer.action_proj_in.num_domains
    if not 0 <= r.domain.id < slots or int(domain_id) != r.domain.id:
        raise ConfigError(f"domain '{r.domain.name}' is slot {int(domain_id)}, outside the model's {slots} slots or "
                          f"not its recorded slot {r.domain.id}: register the domain with its own slot")
    vision_cond = [int(i) for i in torch.nonzero(vision_mask[:, 0, 0] > 0, as_tuple=False).flatten()]
    branches, noisy = {}, (0, 0)
    for name, text in texts.items():
        branches[name], *counts = _packed_branch(pipe, text, latents, action_latents, vision_cond, action_cond,
                                                 domain_id, fps_vision, device)
        noisy = tuple(counts)
    scheduler = _scheduler(pipe, int(r.steps), device)
    return PreparedChunk(r, latents, action_latents, branches, vision_mask, bool(len(vision_cond) < len(vision_mask)),
                         noisy[0], noisy[1], scheduler, scheduler.timesteps.cpu(), dtype, device)


def _unchecked_domain_forward(self, x: torch.Tensor, domain_id: torch.Tensor) -> torch.Tensor:
    """`DomainAwareLinear.forward` without its range check of the ids (a host synchronisation per call); the ids
    were checked on the host in `prepare_chunk`."""
    domain_id = domain_id.to(device=x.device, dtype=torch.long).reshape(-1)
    weight = self.fc(domain_id).view(domain_id.shape[0], self.input_size, self.output_size)
    bias = self.bias(domain_id).view(domain_id.shape[0], self.output_size)
    if x.ndim == 2:
        return torch.bmm(x.unsqueeze(1), weight).squeeze(1) + bias
    return torch.bmm(x, weight) + bias.unsqueeze(1)


@contextmanager
def unchecked_domain_ids(modules: list[torch.nn.Module]):
    """Within the block, the action projections skip their per-call domain-id range check."""
    for m in modules:
        m.forward = types.MethodType(_unchecked_domain_forward, m)
    try:
        yield
    finally:
        for m in modules:
            del m.forward


RECOMPILE_LIMIT = 64  # packed shapes a compiled sampler may meet: batch sizes x guidance branches, with room


class Cosmos3ChunkSampler(ChunkSampler):
    """Forward chunks of several rollouts per transformer call, on fixed buffers (CUDA graphs with `cuda_graphs`,
    compiled decoder layers with `compile`); each chunk equals a lone plain pipeline call's within fp tolerance."""

    def __init__(self, dynamics, pipe, *, cuda_graphs: bool, compile: bool) -> None:
        from diffusers.pipelines.cosmos.mixed_precision import Cosmos3MixedPrecisionConfig

        from worldtune.models.static_call import StaticCall

        super().__init__(dynamics, pipe)
        device = pipe._get_execution_device()
        if cuda_graphs and device.type != "cuda":
            raise ConfigError("cuda_graphs needs a CUDA device: turn it off on CPU")
        if Cosmos3MixedPrecisionConfig.resolve(pipe.transformer).format != "none":
            raise ConfigError("this checkpoint runs a mixed-precision (FP8) step schedule that worldtune's chunk sampler "
                              "does not follow: set serve.sampler = \"pipeline\"")
        if compile:
            from worldtune.models.speed import compile_blocks

            compile_blocks(pipe.transformer, dynamic=None)
            # every batch size and guidance branch is its own packed shape (a graph each): dynamo's default limit of
            # 8 would send serve's larger batches back to eager layers once a few sizes have run
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        self.call = StaticCall(pipe.transformer, graphs=cuda_graphs)
        self._projections = [m for m in pipe.transformer.modules() if type(m).__name__ == "DomainAwareLinear"]

    @torch.no_grad()
    def run(self, requests: list[ChunkRequest]) -> list[np.ndarray]:
        from worldtune.models.frames import decode_to_frames

        for r in requests:
            self.dynamics._check_call(self.pipe, r.domain, r.steps, r.tier, r.view_point, r.fps)
        chunks = [prepare_chunk(self.pipe, r) for r in requests]
        groups: dict[tuple[int, float], list[PreparedChunk]] = {}
        for c in chunks:
            groups.setdefault((int(c.request.steps), float(c.request.guidance)), []).append(c)
        for group in groups.values():
            self.denoise(group)
        return [decode_to_frames(self.pipe, c.latents) for c in chunks]

    def denoise(self, chunks: list[PreparedChunk]) -> None:
        """The pipeline's loop for chunks of one step count and guidance: per step, one call per guidance branch
        for every chunk whose packed sequence has that branch's shape. With a step cache (serve.cache), every such
        call keeps a cache state of its own, and the chunks start with an empty cache."""
        from worldtune.models.cosmos3_batch import call_grouped
        from worldtune.models.step_cache import reset_step_cache

        guided = chunks[0].request.guidance != 1.0  # the pipeline's do_classifier_free_guidance
        model = self.pipe.transformer
        steps = len(chunks[0].scheduler.timesteps)
        reset_step_cache(model)
        with unchecked_domain_ids(self._projections):
            for i, t in enumerate(chunks[0].scheduler.timesteps):
                timestep = chunks[0].timesteps_host[i].item()
                cond = call_grouped(model, [c.kwargs("cond", timestep) for c in chunks],
                                    call=self._branch_call("cond", i, steps))
                uncond = (call_grouped(model, [c.kwargs("uncond", timestep) for c in chunks],
                                       call=self._branch_call("uncond", i, steps)) if guided else [None] * len(chunks))
                for c, co, un in zip(chunks, cond, uncond):
                    c.step(t, co[0], un[0] if un is not None else None)
        reset_step_cache(model)

    def _branch_call(self, branch: str, step: int, steps: int):
        """`self.call`, each call of one step and branch (one per packed shape, in the same order every step) in its
        own step-cache state; `self.call` itself without a step cache."""
        from worldtune.models.step_cache import has_step_cache, step_context

        model = self.pipe.transformer
        if not has_step_cache(model):
            return self.call
        calls = iter(range(1 << 30))

        def call(**kwargs):
            with step_context(model, f"{branch}/{next(calls)}", step, steps):
                return self.call(**kwargs)

        return call
