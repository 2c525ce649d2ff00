"""Model families: what differs between Cosmos generations, behind one interface.

worldtune's stages (cache, train, generate, export, info) never ask which family a model is; they
ask its family object to do the family-specific part. One subclass per family owns:

- building a random-initialised pipeline (tiny, real size, meta) and the class names on disk;
- text conditioning: what the cache stores for a prompt (an embedding, or text-token ids) and
  which kinds exist;
- the model's prediction for one flow-matching training step, in latent layout, so that the
  generic objective (`train/flow.py`) applies unchanged;
- sampling one video (the pipeline call, or worldtune's own sampler where it has one);
- LoRA targets and writing an adapter plain diffusers loads.

This is the lesson of diffusers' one-folder-per-model layout: adding a family is adding a module,
not a branch in every stage. The table of families is `models/family.py`; a concrete family imports only this
module, so nothing imports back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from worldtune.errors import DatasetError
from worldtune.models.action_dynamics import ActionDynamics


class ModelFamily:
    """The family-specific steps of one model spec. Subclasses fill in the class variables and methods."""

    name: ClassVar[str]
    pipeline_class: ClassVar[str]  # the diffusers pipeline class written to model_index.json
    transformer_class: ClassVar[str]
    label: ClassVar[str]  # for messages: "Cosmos-Predict2.5"
    modes: ClassVar[tuple[str, ...]] = ("text2world", "image2world", "video2world")
    text_kinds: ClassVar[tuple[str, ...]] = ("raw",)  # what the cache can store per prompt; the first is "auto"
    vae_spatial: ClassVar[int] = 8  # pixels per latent, in height and width
    vae_temporal: ClassVar[int] = 4  # frames per latent frame (after the first)
    patch: ClassVar[int] = 2  # latents per token, in height and width
    fused_adaln: ClassVar[bool] = False  # models/speed.py's per-frame adaLN fusion applies
    multiview: ClassVar[bool] = False  # worldtune's multi-view model and sampler cover this family
    own_sampler: ClassVar[bool] = False  # worldtune's batched-guidance sampler covers this family
    text_components: ClassVar[tuple[str, ...]] = ("text_encoder",)  # model-folder parts the cached text depends on
    text_depends_on_clip: ClassVar[bool] = False  # the cached text also depends on the clips' shape and fps
    # generation hands the sampler prompt embeddings computed once per prompt (False: the pipeline takes the
    # prompt text and tokenizes it itself, so nothing is encoded up front)
    prompt_embeddings: ClassVar[bool] = True
    # torch.compile's `dynamic` for the repeated blocks: False compiles one graph per sequence length (fixed
    # for a DiT whose text has a fixed length); None lets dynamo mark a length dynamic once it changes
    compile_dynamic: ClassVar[bool | None] = False
    dynamics_class: ClassVar[type[ActionDynamics] | None] = None  # the action interface, where the family has one

    def __init__(self, spec) -> None:
        self.spec = spec

    # ------------------------------------------------------------------ building
    def build_transformer(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        raise NotImplementedError

    def build_pipeline(self, device: str = "cpu", dtype: torch.dtype = torch.float32):
        """Every component, random-initialised from the current random state (models.build seeds it)."""
        raise NotImplementedError

    def pipeline_type(self):
        import diffusers

        return getattr(diffusers, self.pipeline_class)

    def transformer_type(self):
        import diffusers

        return getattr(diffusers, self.transformer_class)

    @property
    def lora_targets(self) -> tuple[str, ...]:
        return self.spec.lora_targets

    # ------------------------------------------------------------------ conditioning
    def resolve_text_kind(self, kind: str) -> str:
        """'auto' -> the family's preferred cached text; anything else is checked against what exists."""
        if kind == "auto":
            return self.text_kinds[0]
        if kind not in self.text_kinds:
            raise DatasetError(f"cache.text = '{kind}' does not exist for {self.label} models; "
                               f"use one of {', '.join(self.text_kinds)} (or 'auto')")
        return kind

    def encode_prompts(self, pipe, prompts: list[str], kind: str, device: torch.device | str | None = None,
                       max_sequence_length: int | None = None, *, num_frames: int | None = None,
                       height: int | None = None, width: int | None = None, fps: float | None = None) -> torch.Tensor:
        """The text conditioning of each prompt, stacked on dim 0: what the cache stores and generation passes
        on. The clip's shape and fps matter only where `text_depends_on_clip` (the spec's defaults if unset)."""
        raise NotImplementedError

    def text_encoder(self, pipe) -> torch.nn.Module | None:
        """The separate text encoder to park on the CPU once prompts are encoded (None: the family has none)."""
        return getattr(pipe, "text_encoder", None)

    def trainable_text_kinds(self, full: bool) -> tuple[str, ...]:
        """Cached text kinds a run can train from, preferred first (full fine-tuning may need fewer)."""
        return self.text_kinds

    def prepare_for_text(self, transformer: torch.nn.Module, kind: str) -> dict[str, torch.nn.Module]:
        """Adapt a transformer to train from cached text of `kind`; returns the submodules it set aside
        (by attribute name), which a saved full model gets back. Default: nothing to do."""
        return {}

    # ------------------------------------------------------------------ training
    def objective_defaults(self, height: int, width: int) -> dict[str, Any]:
        """FlowMatchingLoss settings of the family's own post-training recipe for clips of this size; a
        train.* field the user sets wins. Empty: the config's defaults (the Cosmos 2.5 recipe)."""
        return {}

    def full_finetune_parameters(self, transformer: torch.nn.Module) -> list[torch.nn.Parameter]:
        """What `train.mode = "full"` trains (default: every parameter); the rest is frozen here."""
        transformer.requires_grad_(True)
        return list(transformer.parameters())

    def predict(self, model: torch.nn.Module, batch, text: torch.Tensor, dtype: torch.dtype,
                fps: float | None) -> torch.Tensor:
        """The model's velocity for a noised FlowBatch, in the latent layout of `batch.x_t`."""
        raise NotImplementedError

    @property
    def pixel_multiple(self) -> int:
        """Height and width must be multiples of this (one token covers patch x vae_spatial pixels)."""
        return self.patch * self.vae_spatial

    def latent_size(self, frames: int, height: int, width: int) -> tuple[int, int, int]:
        """(latent frames, latent height, latent width) of a clip."""
        return (frames - 1) // self.vae_temporal + 1, height // self.vae_spatial, width // self.vae_spatial

    def train_flops_per_sample(self, frames: int, height: int, width: int, fused_adaln: bool) -> float | None:
        """Model FLOPs of one sample's training step (3 x forward), for MFU; None where not modelled."""
        return None

    def info_numbers(self, frames: int, height: int, width: int, batch: int, lora_rank: int,
                     mode: str) -> dict[str, Any] | None:
        """`model info`'s numbers where the family counts them itself; None: the DiT formulas of models/info.py."""
        return None

    def memory_model(self, frames: int, height: int, width: int, batch: int, mode: str, lora_rank: int,
                     checkpointed_blocks: int, selective: bool, compiled: bool, text_tokens: int | None = None,
                     action_steps: int = 0):
        """(ParamCount, parameters of one repeated block, number of blocks, ActivationEstimate) for the memory
        planner where the family models its own layers (`action_steps`: action tokens per clip of an action run);
        None: the DiT formulas of models/memory.py."""
        return None

    def per_block_bytes(self, latent_t: int, latent_h: int, latent_w: int, batch: int, mode: str,
                        fused_adaln: bool, rank: int) -> float | None:
        """Activation bytes one block keeps for backward (for automatic checkpointing); None where not modelled."""
        return None

    def dynamics(self) -> ActionDynamics:
        """The family's action interface (models/action_dynamics.py: domains, forward and inverse calls, training
        and adapters), for the action tasks of `train.task`; a family without one is a one-line error."""
        if self.dynamics_class is None:
            from worldtune.errors import ConfigError

            raise ConfigError(f"{self.spec.name} is a {self.label} model, which has no action-conditioned mode: "
                              "train.task = \"forward_dynamics\" (or inverse_dynamics, joint) needs a Cosmos 3 model "
                              "(model.name / model.path)")
        return self.dynamics_class()

    def has_action_heads(self, transformer: torch.nn.Module) -> bool:
        """Whether a loaded transformer takes actions (False for a family without an action interface)."""
        return self.dynamics_class is not None and self.dynamics_class().has_heads(transformer)

    # ------------------------------------------------------------------ generation
    def latent_shape(self, pipe, num_frames: int, height: int, width: int) -> tuple[int, ...]:
        c = self.latent_channels(pipe)
        t = (num_frames - 1) // pipe.vae_scale_factor_temporal + 1
        return (1, c, t, height // pipe.vae_scale_factor_spatial, width // pipe.vae_scale_factor_spatial)

    def latent_channels(self, pipe) -> int:
        return pipe.transformer.config.in_channels - 1

    def default_negative_prompt(self, pipe) -> str | None:
        """The negative prompt generation uses when the config sets none (None: the pipeline's own default)."""
        import importlib

        return importlib.import_module(type(pipe).__module__).DEFAULT_NEGATIVE_PROMPT

    def generate(self, pipe, s, frames: np.ndarray | None, prompt: str, prompt_embeds: torch.Tensor | None,
                 negative_embeds: torch.Tensor | None, noise: torch.Tensor, seed: int) -> np.ndarray:
        """One video [T,H,W,3] from the sampling settings `s` (infer.generate.Settings): float in [0,1], or uint8
        frames where the family decodes straight to them on the device (`to_uint8` passes those through).

        `prompt` is the text, for families whose pipeline tokenizes it; the embeddings are None for them
        (`prompt_embeddings` False). `noise` is `initial_noise(seed, latent_shape)`: a family that lets the
        pipeline draw it passes a CPU generator seeded with `seed`, which draws the same tensor."""
        raise NotImplementedError

    def generate_latents(self, pipe, s, frames: np.ndarray | None, prompt: str, prompt_embeds: torch.Tensor | None,
                         negative_embeds: torch.Tensor | None, noise: torch.Tensor, seed: int) -> Any:
        """The sampling half of `generate`; `decode_latents` of its result gives `generate`'s frames. Split so that
        generation can decode one video while the next one samples. The default samples and decodes here (a family
        whose pipeline decodes inside its call) and `decode_latents` passes the frames on."""
        return self.generate(pipe, s, frames, prompt, prompt_embeds, negative_embeds, noise, seed)

    def decode_latents(self, pipe, sampled: Any, vae: torch.nn.Module | None = None) -> np.ndarray:
        """The frames of `generate_latents`' result; `vae` (a `frames.decode_view` of the pipeline's VAE, with caches
        of its own) decodes where given, so that a decode in another thread leaves the pipeline's VAE alone."""
        return sampled

    def sample_from_first_latent(self, transformer: torch.nn.Module, scheduler, x0: torch.Tensor,
                                 text: torch.Tensor, noise: torch.Tensor, steps: int, guidance: float,
                                 fps: float | None = None) -> torch.Tensor:
        """Latents sampled from the first clean latent frame of `x0` (the trainer's validation videos);
        the unconditional branch is the empty conditioning that text dropout trains."""
        raise NotImplementedError

    # ------------------------------------------------------------------ adapters
    def save_adapter(self, out: Path, state_dict: dict[str, torch.Tensor], metadata: dict[str, Any]) -> Path:
        """Write LoRA weights (with their peft metadata, so alpha is kept) as plain diffusers loads them."""
        raise NotImplementedError

    def adapter_info(self) -> dict[str, Any]:
        """The base-model facts written beside an adapter (worldtune_adapter.json) and checked when loading."""
        t = self.spec.transformer
        return {"base_model": self.spec.name, "family": self.name,
                "hidden_size": t["num_attention_heads"] * t["attention_head_dim"], "num_layers": t["num_layers"]}

