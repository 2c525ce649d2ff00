"""Which frame sizes the stages can use, checked before any work and refused in one line naming valid sizes.

Two rules stack up. yuv420p video (every clip `prepare` writes) stores colour at half resolution,
so a frame, and every cell of a grid, needs even sides. A model takes frames whose sides are
multiples of its pixel multiple (`ModelFamily.pixel_multiple`: 16 for Predict2/2.5 and Cosmos 3).
`prepare` does not know the model and checks the first rule; `cache`, `prepare --cache` and `train`
check both. A size that broke a rule used to fail much later: inside a prepare worker, in a VAE
that crops (Predict) or crashes (Cosmos 3), or in training after the whole cache was computed.

No OpenCV or PyAV here: the trainer and the config checks import this (OpenCV edits the
environment on import).
"""

from __future__ import annotations

import math

from worldtune.errors import ConfigError


def nearest_multiples(value: int, step: int) -> str:
    """The positive multiples of `step` nearest to `value`, for messages: "176 or 192" (or "320" when it is one)."""
    lo = value // step * step
    if lo == value and value > 0:
        return str(value)
    return f"{lo} or {lo + step}" if lo > 0 else str(step)


def size_steps(multiple: int = 2, rows: int = 1, cols: int = 1) -> tuple[int, int]:
    """(height step, width step): a whole frame's sides must be multiples of these.

    Multiples of `multiple` (2 for yuv420p; a model's pixel multiple) that split into rows x cols
    grid cells of even sides.
    """
    return math.lcm(multiple, 2 * rows), math.lcm(multiple, 2 * cols)


def grid_shape(layout: dict | None) -> tuple[int, int]:
    """(rows, cols) of a layout's `to_dict()` (a prepared dataset's `info.json` entry); (1, 1) unless a grid."""
    if layout and layout.get("type") == "grid":
        return int(layout.get("rows", 2)), int(layout.get("cols", 2))
    return 1, 1


def check_frame_size(height: int, width: int, steps: tuple[int, int], problem: str, fix: str = "use") -> None:
    """Raise `ConfigError` "<problem>: <fix> a height of .. and a width of .." unless the sides are positive
    multiples of `steps` (`size_steps`)."""
    hs, ws = steps
    if height >= hs and width >= ws and height % hs == 0 and width % ws == 0:
        return
    raise ConfigError(f"{problem}: {fix} a height of {nearest_multiples(height, hs)} and a width of "
                      f"{nearest_multiples(width, ws)}")


def check_model_frame_size(height: int, width: int, layout: dict | None, multiple: int, model: str,
                           what: str, fix: str) -> None:
    """`check_frame_size` for a model whose sides are multiples of `multiple` pixels; the sizes it names
    keep a grid's cells even, so `prepare` accepts them."""
    check_frame_size(height, width, size_steps(multiple, *grid_shape(layout)),
                     f"{what} {height}x{width}, but {model} needs height and width in multiples of {multiple} pixels",
                     fix)
