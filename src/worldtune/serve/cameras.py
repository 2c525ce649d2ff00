"""How a robot's cameras map to the frames a forward-dynamics model generates, by the prepared layout.

- grid: the cameras are tiled into one frame (the layout's cells; empty cells black) and generated together,
  as the model was trained on them; the generated frame is cut back into the cells. One model call a chunk.
- separate: every camera is its own model stream, generated with the same actions and seed; the streams do
  not see each other (Cosmos 3's pipeline has no multi-view mode). One model call per camera a chunk.
- single: one camera, one stream.

Every model stream has one frame size (`height` x `width`) that the pipeline gives back unchanged: the size
must fit the tier's canvas (no downscaling) and be a multiple of the VAE's 16 pixels, so that the last
generated frame conditions the next chunk at the same size and a recorded episode has one size per camera.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldtune.data.layout import GridLayout, Layout, SeparateLayout, SingleLayout, resize_frames
from worldtune.errors import ConfigError, ServeError

VAE_STRIDE = 16


def returned_size(height: int, width: int, tier: int) -> tuple[int, int]:
    """The frame size the pipeline returns for action-conditioned frames of this size: the content region of
    the tier's canvas (downscaled to fit, never upscaled), cut to whole latents. Mirrors
    `Cosmos3OmniPipeline._prepare_action_video_conditioning` and `_remove_action_video_padding_from_latent`."""
    from worldtune.models.family import action_dynamics

    th, tw = action_dynamics().canvas(height, width, tier)
    scale = min(tw / width, th / height, 1.0)
    ch, cw = max(1, int(scale * height + 0.5)), max(1, int(scale * width + 0.5))
    return max(ch // VAE_STRIDE, 1) * VAE_STRIDE, max(cw // VAE_STRIDE, 1) * VAE_STRIDE


def check_stream_size(height: int, width: int, tier: int, where: str) -> None:
    """A one-line error when frames of this size would come back at another size."""
    got = returned_size(height, width, tier)
    if got != (height, width):
        raise ConfigError(f"{where}: {height}x{width} frames come back from tier {tier} as {got[0]}x{got[1]}: set "
                          f"serve.height/width to {got[0]}x{got[1]} or pick a tier whose canvas holds {height}x{width}")


@dataclass
class CameraMap:
    """Cameras (by role) <-> model streams, for one layout and one stream size."""

    layout: Layout
    height: int  # of one model stream (the whole grid frame for a grid)
    width: int

    @property
    def roles(self) -> list[str]:
        return list(self.layout.roles)

    @property
    def streams(self) -> int:
        return len(self.roles) if isinstance(self.layout, SeparateLayout) else 1

    def camera_sizes(self) -> dict[str, tuple[int, int]]:
        if isinstance(self.layout, GridLayout):
            return {r: self.layout.cell_size(self.height, self.width) for r in self.roles}
        return {r: (self.height, self.width) for r in self.roles}

    def to_streams(self, frames: dict[str, np.ndarray]) -> list[np.ndarray]:
        """First frames {role: [H, W, 3] uint8} (any size) -> the model streams' first frames [h, w, 3]."""
        missing = [r for r in self.roles if r not in frames]
        if missing:
            raise ServeError(f"reset: no frame for camera {missing} (the layout's cameras are {self.roles})")
        for r in self.roles:
            f = frames[r]
            if f.ndim != 3 or f.shape[-1] != 3 or f.dtype != np.uint8:
                raise ServeError(f"reset: camera {r} frame is {f.dtype} {list(f.shape)}, expected one uint8 RGB "
                                 "frame [H, W, 3]")
        views = {r: frames[r][None] for r in self.roles}
        if isinstance(self.layout, GridLayout):
            return [self.layout.pack(views, self.height, self.width)[0]]
        resize = self.layout.resize
        return [resize_frames(views[r], self.height, self.width, resize)[0] for r in self.roles]

    def to_cameras(self, videos: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Generated stream videos [T, h, w, 3] -> {role: [T, ch, cw, 3]}."""
        if isinstance(self.layout, GridLayout):
            return {r: np.ascontiguousarray(v) for r, v in self.layout.split(videos[0]).items()}
        if isinstance(self.layout, SingleLayout):
            return {self.layout.role: videos[0]}
        return dict(zip(self.roles, videos))
