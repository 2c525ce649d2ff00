"""Action dynamics: what an action-conditioned model family offers, behind one interface.

A family whose model takes robot actions (Cosmos 3 today, through its pipeline's action modes) gives the stages an
`ActionDynamics` object (`ModelFamily.dynamics()`, or `models.family.action_dynamics()`), and the stages ask it:

- **domains and slots**: which embodiment domains the model knows, the slot and raw action width of each, how a
  dataset's actions map onto one (an existing domain, or a free slot of its own), and the scaling that domain's
  actions are trained in;
- **forward and inverse calls**: first frame + an action chunk -> video, and video -> the chunk, through the
  model's own pipeline, on the canvas of a resolution tier and with a caption view point; and a chunk sampler
  (`chunk_sampler`) that runs several rollouts' forward chunks at once, as `worldtune serve` does;
- **training**: the action caption's token ids, a clip's latents on the canvas, the per-sample prediction of a
  noised batch, the forward-dynamics sampler and the domain's trainable projection rows;
- **adapters**: the facts an action adapter was trained with, and loading its domain rows into a transformer.

data/, train/, infer/, eval/, idm/ and serve/ use only this; which family stands behind it is the registry's
business (models/family.py), the way torchtitan's trainer sees a `TrainSpec` and never the model class.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # annotations only: `prepare` asks about domains without loading torch
    import numpy as np
    import torch
    from torch import nn


@dataclass(frozen=True)
class ActionDomain:
    """The slot a dataset's actions use: `new` = a slot no released domain uses (its rows start untrained)."""

    name: str
    id: int
    width: int
    new: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ChunkRequest:
    """One forward-dynamics chunk to generate: `actions` [K, D] (checked, in the model's scaling) from
    `first_frame` [H, W, 3] uint8, with the noise of `seed`; the other fields as `ActionDynamics.forward` takes."""

    first_frame: Any
    actions: Any
    domain: ActionDomain
    task: str
    seed: int
    steps: int
    guidance: float
    tier: int
    view_point: str
    fps: float


class ChunkSampler:
    """Forward-dynamics chunks one call at a time through `ActionDynamics.forward` (the plain pipeline call); a
    family with a faster sampler returns its own from `ActionDynamics.chunk_sampler`."""

    def __init__(self, dynamics: "ActionDynamics", pipe) -> None:
        self.dynamics, self.pipe = dynamics, pipe

    def run(self, requests: list[ChunkRequest]) -> list[np.ndarray]:
        """The video [K+1, h, w, 3] uint8 of each request, in order; each equals a lone `forward` call's."""
        return [self.dynamics.forward(self.pipe, r.first_frame, r.actions, r.domain, r.task, seed=r.seed,
                                      steps=r.steps, guidance=r.guidance, tier=r.tier, view_point=r.view_point,
                                      fps=r.fps) for r in requests]


class ActionDynamics:
    """The action interface of one family; subclasses fill in the class variables and methods."""

    label: ClassVar[str]  # for messages: "Cosmos 3"
    tiers: ClassVar[tuple[int, ...]]  # resolution tiers whose canvases an action run is conditioned on
    view_points: ClassVar[tuple[str, ...]]  # the caption's camera view points
    rows_file: ClassVar[str]  # the domain's trained rows, beside an adapter
    row_tables: ClassVar[tuple[str, ...]]  # the per-domain tables (submodule names) an adapter may write rows into

    # ------------------------------------------------------------------ domains and slots
    @property
    def domain_ids(self) -> dict[str, int]:
        """Known domain name -> slot."""
        raise NotImplementedError

    @property
    def raw_widths(self) -> dict[str, int]:
        """Known domain name -> raw action width, for the domains that fix one."""
        raise NotImplementedError

    def resolve_domain(self, name: str | None, domain_id: int | None, width: int, robot: str,
                       where: str) -> ActionDomain:
        """The domain for actions of `width` entries: an existing one by name (its width must match), or a new
        slot (`domain_id`, default a free one) named `name` or after the robot; `where` names the source of the
        width, for the one-line errors."""
        raise NotImplementedError

    def matching_domains(self, width: int) -> list[str]:
        """Known domains of this raw width (a hint only: the width says nothing about the meaning)."""
        return sorted(n for n, w in self.raw_widths.items() if w == width)

    def default_normalization(self, domain: ActionDomain) -> str:
        """The action scaling `normalization = "auto"` means for a domain."""
        raise NotImplementedError

    def register_domain(self, domain: ActionDomain) -> None:
        """Make a new domain known to the pipeline in this process (an existing one needs nothing)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the model
    def has_heads(self, transformer: nn.Module) -> bool:
        """Whether a loaded transformer (or its config) has the action heads."""
        raise NotImplementedError

    def check_heads(self, transformer: nn.Module) -> None:
        """A one-line error unless the transformer has action heads to train."""
        raise NotImplementedError

    def canvas(self, height: int, width: int, tier: int) -> tuple[int, int]:
        """The padded canvas an action run conditions frames of this size on at a resolution tier."""
        raise NotImplementedError

    # ------------------------------------------------------------------ forward and inverse calls
    def forward(self, pipe, first_frame: np.ndarray, actions: np.ndarray, domain: ActionDomain, task: str, *,
                seed: int, steps: int, guidance: float, tier: int, view_point: str, fps: float) -> np.ndarray:
        """The video [K+1, h, w, 3] uint8 that the checked chunk `actions` [K, D] produces from `first_frame`
        [H, W, 3] uint8."""
        raise NotImplementedError

    def inverse(self, pipe, video: np.ndarray, domain: ActionDomain, task: str, *, seed: int, steps: int,
                guidance: float, tier: int, view_point: str, fps: float) -> np.ndarray:
        """The action chunk [K, D] float32 (in the model's scaling) that leads through `video` [K+1, H, W, 3]."""
        raise NotImplementedError

    def chunk_sampler(self, pipe, *, fast: bool, cuda_graphs: bool, compile: bool) -> ChunkSampler:
        """A sampler of forward chunks for a loaded pipeline. `fast`: the family's own sampler where it has one
        (several rollouts per transformer call, fixed-shape buffers, CUDA graphs with `cuda_graphs`, compiled
        blocks with `compile`), else the plain pipeline call, one chunk at a time."""
        return ChunkSampler(self, pipe)

    # ------------------------------------------------------------------ training
    def prompt_ids(self, pipe, tasks: list[str], chunk: int, canvas: tuple[int, int], fps: float,
                   view_point: str, max_length: int) -> torch.Tensor:
        """The cached text of each task's action caption, stacked on dim 0 (row 1 of each: the dropped text)."""
        raise NotImplementedError

    def encode_clip(self, pipe, frames: np.ndarray, tier: int) -> torch.Tensor:
        """A clip's latents as an action run conditions it (on the tier's canvas)."""
        raise NotImplementedError

    def train_rows(self, transformer: nn.Module, domain_id: int, init_from: int | None,
                   outputs: bool = False) -> list[nn.Parameter]:
        """Make one domain's projection rows trainable (the output side too with `outputs`); returns them."""
        raise NotImplementedError

    def train_tables(self, transformer: nn.Module, outputs: bool = False) -> list[nn.Parameter]:
        """Make the action projections trainable whole, every slot (a model trained from its start)."""
        raise NotImplementedError

    def predict(self, model: nn.Module, batch, text: torch.Tensor, actions, domain_ids: torch.Tensor,
                dtype: torch.dtype, fps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(video velocity, action velocity) of a noised FlowBatch and ActionBatch, each sample in its mode."""
        raise NotImplementedError

    def sample(self, transformer: nn.Module, scheduler, x0: torch.Tensor, text: torch.Tensor, actions: torch.Tensor,
               domain_id: int, noise: torch.Tensor, steps: int, guidance: float,
               fps: float | None = None) -> torch.Tensor:
        """Forward-dynamics latents from the first clean latent frame of `x0` and a clean chunk (validation)."""
        raise NotImplementedError

    def save_rows(self, out: str | Path, transformer: nn.Module) -> Path:
        """Write the trained domain rows beside an adapter; returns the file."""
        raise NotImplementedError

    def merge_rows(self, transformer: nn.Module) -> None:
        """Fold trained domain rows into the tables (a full model is saved with them)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ adapters
    def read_adapter_info(self, adapter_dir: str | Path) -> dict[str, Any]:
        """The facts an action adapter was trained with (task, domain, scaling, chunk, fps, tier, view point)."""
        raise NotImplementedError

    def require_mode(self, info: dict[str, Any], mode: str, adapter: str | Path) -> None:
        """A one-line error unless the adapter's task trained `mode`."""
        raise NotImplementedError

    def load_adapter_rows(self, transformer: nn.Module, adapter_dir: str | Path) -> ActionDomain:
        """Write an adapter's trained domain rows into the transformer and register its domain; returns it."""
        raise NotImplementedError
