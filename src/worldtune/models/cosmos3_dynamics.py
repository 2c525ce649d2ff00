"""Cosmos 3's action dynamics: the `ActionDynamics` interface over its pipeline's action modes.

The embodiment domains are diffusers' table (models/cosmos3_domains.py); the forward and inverse calls are
`Cosmos3OmniPipeline.__call__` with a `CosmosActionCondition`, so a trained model behaves here exactly as in a
user's own script, with worldtune's seeding convention (the noise from a CPU `torch.Generator` seeded with `seed`,
as `Cosmos3.generate` does); training and adapters are models/cosmos3_actions.py. This module imports torch and
diffusers only inside its methods, so `prepare` can ask about domains without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from worldtune.errors import ConfigError
from worldtune.models import cosmos3_domains as domains
from worldtune.models.action_dynamics import ActionDomain, ActionDynamics

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

TIERS = (256, 480, 704, 720)  # diffusers' _ACTION_RESOLUTION_BINS
VIEW_POINTS = ("ego_view", "third_person_view", "wrist_view", "concat_view")  # _ACTION_VIEWPOINT_TEMPLATES


class Cosmos3Dynamics(ActionDynamics):
    """Forward dynamics, inverse dynamics and policy through `Cosmos3OmniPipeline`'s action modes."""

    label = "Cosmos 3"
    tiers = TIERS
    view_points = VIEW_POINTS
    rows_file = domains.ROWS_FILE
    row_tables = domains.INPUT_TABLES + domains.OUTPUT_TABLES

    # ------------------------------------------------------------------ domains and slots
    @property
    def domain_ids(self) -> dict[str, int]:
        return domains.DOMAIN_IDS

    @property
    def raw_widths(self) -> dict[str, int]:
        return domains.RAW_WIDTHS

    def resolve_domain(self, name: str | None, domain_id: int | None, width: int, robot: str,
                       where: str) -> ActionDomain:
        return domains.resolve_domain(name, domain_id, width, robot, where)

    def matching_domains(self, width: int) -> list[str]:
        return domains.matching_domains(width)

    def default_normalization(self, domain: ActionDomain) -> str:
        """A released domain's rows were trained on raw actions; a new slot learns from quantile-scaled ones."""
        return "quantile" if domain.new else "none"

    def register_domain(self, domain: ActionDomain) -> None:
        from worldtune.models.cosmos3_actions import register_domain

        register_domain(domain)

    # ------------------------------------------------------------------ the model
    def has_heads(self, transformer) -> bool:
        """`action_gen` of a transformer's config (or of the config itself)."""
        return bool(getattr(getattr(transformer, "config", transformer), "action_gen", False))

    def check_heads(self, transformer: nn.Module) -> None:
        from worldtune.models.cosmos3_actions import _tables

        _tables(transformer, domains.INPUT_TABLES)

    def canvas(self, height: int, width: int, tier: int) -> tuple[int, int]:
        from worldtune.models.cosmos3_actions import action_canvas

        return action_canvas(height, width, tier)

    # ------------------------------------------------------------------ forward and inverse calls
    def forward(self, pipe, first_frame: np.ndarray, actions: np.ndarray, domain: ActionDomain, task: str, *,
                seed: int, steps: int, guidance: float, tier: int, view_point: str, fps: float) -> np.ndarray:
        import numpy as np
        import torch
        from PIL import Image

        from worldtune.models.cosmos3_pipeline import action_condition, encode_leading_frames
        from worldtune.models.latents import to_uint8

        self._check_call(pipe, domain, steps, tier, view_point, fps)
        condition = action_condition("forward_dynamics", len(actions), domain, tier, view_point,
                                     raw_actions=torch.tensor(actions), image=Image.fromarray(first_frame))
        with encode_leading_frames(pipe, 1):  # only frame 0 conditions: the rest of the VAE's work is thrown away
            out = pipe(task, action=condition, **_call_kwargs(seed, steps, guidance, fps), output_type="np")
        return to_uint8(np.asarray(out.video))

    def inverse(self, pipe, video: np.ndarray, domain: ActionDomain, task: str, *, seed: int, steps: int,
                guidance: float, tier: int, view_point: str, fps: float) -> np.ndarray:
        import numpy as np
        from PIL import Image

        self._check_call(pipe, domain, steps, tier, view_point, fps)
        from worldtune.models.cosmos3_pipeline import action_condition

        condition = action_condition("inverse_dynamics", len(video) - 1, domain, tier, view_point,
                                     video=[Image.fromarray(f) for f in video])
        out = pipe(task, action=condition, **_call_kwargs(seed, steps, guidance, fps), output_type="latent")
        return out.action[0].float().numpy().astype(np.float32)

    def chunk_sampler(self, pipe, *, fast: bool, cuda_graphs: bool, compile: bool):
        """`fast`: models/cosmos3_rollout.py's sampler (several rollouts per transformer call, fixed buffers, CUDA
        graphs); else the plain pipeline call per chunk."""
        if not fast:
            return super().chunk_sampler(pipe, fast=False, cuda_graphs=False, compile=False)
        from worldtune.models.cosmos3_rollout import Cosmos3ChunkSampler

        return Cosmos3ChunkSampler(self, pipe, cuda_graphs=cuda_graphs, compile=compile)

    def _check_call(self, pipe, domain: ActionDomain, steps: int, tier: int, view_point: str, fps: float) -> None:
        """One-line errors for what the pipeline would refuse deep inside; registers a new domain."""
        if not self.has_heads(pipe.transformer):
            raise ConfigError("this Cosmos 3 checkpoint has no action heads (transformer action_gen = false): "
                              "action-conditioned generation needs a model trained with them")
        if tier not in TIERS:
            raise ConfigError(f"resolution tier {tier} is not one of {list(TIERS)}: pick the one nearest the frames' "
                              "short side")
        if view_point not in VIEW_POINTS:
            raise ConfigError(f"view point {view_point!r} is not one of {list(VIEW_POINTS)}")
        if steps < 1 or not fps > 0:
            raise ConfigError(f"steps = {steps} and fps = {fps}: both must be positive")
        ids, widths = domains.DOMAIN_IDS, domains.RAW_WIDTHS
        if not domain.new and (ids.get(domain.name) != domain.id or widths.get(domain.name) != domain.width):
            raise ConfigError(f"domain {domain.to_dict()} is not Cosmos 3's '{domain.name}' (slot "
                              f"{ids.get(domain.name)}, {widths.get(domain.name)}-D): mark it new or fix its slot")
        if domain.width > pipe.transformer.config.action_dim:
            raise ConfigError(f"domain '{domain.name}' is {domain.width}-D but the model's action tokens hold "
                              f"{pipe.transformer.config.action_dim}")
        self.register_domain(domain)

    # ------------------------------------------------------------------ training
    def prompt_ids(self, pipe, tasks: list[str], chunk: int, canvas: tuple[int, int], fps: float,
                   view_point: str, max_length: int) -> torch.Tensor:
        from worldtune.models.cosmos3_actions import action_prompt_ids

        return action_prompt_ids(pipe, tasks, chunk, canvas, fps, view_point, max_length)

    def encode_clip(self, pipe, frames: np.ndarray, tier: int) -> torch.Tensor:
        from worldtune.models.cosmos3_actions import encode_clip_on_canvas

        return encode_clip_on_canvas(pipe, frames, tier)

    def train_rows(self, transformer: nn.Module, domain_id: int, init_from: int | None,
                   outputs: bool = False) -> list[nn.Parameter]:
        from worldtune.models.cosmos3_actions import train_domain_rows

        return train_domain_rows(transformer, domain_id, init_from, outputs)

    def train_tables(self, transformer: nn.Module, outputs: bool = False) -> list[nn.Parameter]:
        from worldtune.models.cosmos3_actions import train_tables

        return train_tables(transformer, outputs)

    def predict(self, model: nn.Module, batch, text: torch.Tensor, actions, domain_ids: torch.Tensor,
                dtype: torch.dtype, fps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        from worldtune.models.cosmos3_actions import predict_dynamics

        return predict_dynamics(model, batch, text, actions, domain_ids, dtype, fps)

    def sample(self, transformer: nn.Module, scheduler, x0: torch.Tensor, text: torch.Tensor, actions: torch.Tensor,
               domain_id: int, noise: torch.Tensor, steps: int, guidance: float,
               fps: float | None = None) -> torch.Tensor:
        from worldtune.models.cosmos3_actions import sample_forward_dynamics

        return sample_forward_dynamics(transformer, scheduler, x0, text, actions, domain_id, noise, steps, guidance,
                                       fps)

    def save_rows(self, out: str | Path, transformer: nn.Module) -> Path:
        from worldtune.models.cosmos3_actions import save_action_adapter_rows

        return save_action_adapter_rows(out, transformer)

    def merge_rows(self, transformer: nn.Module) -> None:
        from worldtune.models.cosmos3_actions import merge_domain_rows

        merge_domain_rows(transformer)

    # ------------------------------------------------------------------ adapters
    def read_adapter_info(self, adapter_dir: str | Path) -> dict[str, Any]:
        from worldtune.models.cosmos3_actions import read_action_info

        return read_action_info(adapter_dir)

    def require_mode(self, info: dict[str, Any], mode: str, adapter: str | Path) -> None:
        from worldtune.models.cosmos3_actions import require_mode

        require_mode(info, mode, adapter)

    def load_adapter_rows(self, transformer: nn.Module, adapter_dir: str | Path) -> ActionDomain:
        from worldtune.models.cosmos3_actions import load_action_adapter_rows

        return load_action_adapter_rows(transformer, adapter_dir)


def _call_kwargs(seed: int, steps: int, guidance: float, fps: float) -> dict[str, Any]:
    """What both modes pass to the pipeline besides the condition: the noise from a CPU generator."""
    import torch

    return dict(fps=float(fps), num_inference_steps=int(steps), guidance_scale=float(guidance),
                generator=torch.Generator("cpu").manual_seed(int(seed)))
