"""The wire format of `worldtune serve`: JSON bodies, arrays as base64 of their raw bytes with dtype and shape.

Why this and not npz or a binary framing: any language's HTTP and JSON libraries read it (a policy written
in C++ or JavaScript needs nothing of ours), a request is one self-describing document, and on the loopback
the 4/3 base64 overhead costs far less than a chunk's generation. An array is

    {"dtype": "uint8", "shape": [16, 432, 768, 3], "data": "<base64 of the C-order bytes>"}

little-endian, as numpy writes it on every machine worldtune runs on. An action chunk may also be sent as a
plain nested list of numbers.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from worldtune.errors import ServeError
from worldtune.names import shown

DTYPES = ("uint8", "float32", "float64", "float16", "int32", "int64")  # what a request may carry
VERSION = 2  # of the protocol: /info reports it; a client refuses a server of another version (2: rollout ids)
POLICY_CHARS = 64  # the longest policy label `reset` takes: a name for a table row, not a description
SEED_LIMIT = 2 ** 63  # seeds are 0 <= seed < 2^63: an int64 in the recorded episode, and seed + chunk fits torch's
MAX_DIMS = 8  # the most dimensions an array of a request has (a frame has 3, a chunk of frames 4)


class Refused(ServeError):
    """A request the server refuses, with the HTTP status that says why (400 malformed, 404 no such rollout, 409
    not now, 410 ended, 413 too large, 503 full, 507 no space to record)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def check_seed(value: Any) -> int:
    """The seed of a `reset`: an integer 0 <= seed < 2^63 (chunk c of the rollout draws its noise from seed + c)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < SEED_LIMIT:
        raise Refused(f"reset: seed {_shown(value)} is not an integer 0 <= seed < 2^63: give a seed in that range")
    return value


def check_rollout_id(body: dict[str, Any], what: str) -> str:
    """The rollout id a `step` or `end` names (the one its `reset` returned)."""
    rid = body.get("rollout")
    if not isinstance(rid, str) or not rid:
        raise Refused(f"{what}: the body has no \"rollout\": send the rollout id that reset returned")
    return rid


def encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a)
    if a.dtype.name not in DTYPES:
        raise ServeError(f"arrays of {a.dtype} are not sent: convert to one of {', '.join(DTYPES)}")
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": base64.b64encode(a.astype(a.dtype.newbyteorder("<"),
                                                                                              copy=False).tobytes()).decode()}


def decode_array(obj: Any, what: str) -> np.ndarray:
    """An array from its JSON form (or a nested list of numbers); a one-line ServeError naming `what` otherwise."""
    if isinstance(obj, list):
        try:
            a = np.asarray(obj, dtype=np.float64)
        except (TypeError, ValueError, OverflowError, RecursionError):
            raise ServeError(f"{what}: a nested list of numbers of one shape expected") from None
        if a.ndim > MAX_DIMS:
            raise ServeError(f"{what}: {a.ndim} dimensions, at most {MAX_DIMS}")
        return a
    if not isinstance(obj, dict) or not {"dtype", "shape", "data"} <= set(obj):
        raise ServeError(f"{what}: expected an array {{\"dtype\", \"shape\", \"data\"}} (base64) or a nested list")
    dtype, shape = obj["dtype"], obj["shape"]
    if dtype not in DTYPES:
        raise ServeError(f"{what}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or \
            not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise ServeError(f"{what}: shape {_shown(shape)} is not a list of at most {MAX_DIMS} sizes")
    try:
        raw = base64.b64decode(str(obj["data"]), validate=True)
    except ValueError:
        raise ServeError(f"{what}: data is not valid base64") from None
    want = math.prod(shape) * np.dtype(dtype).itemsize  # Python integers: a huge shape cannot overflow to a match
    if len(raw) != want:
        raise ServeError(f"{what}: {len(raw)} bytes of data, but {dtype} {shape} takes {want}")
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape).astype(dtype, copy=False)


def check_policy(value: Any) -> str | None:
    """The policy label of a `reset` (None: unlabelled). It names the rollout's recording and its row in
    `worldtune serve-summary`, so it is a short printable name: anything else is refused in one line."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or value != value.strip():
        raise ServeError(f"reset: policy {_shown(value)} is not a name: give a non-empty string without leading or "
                         "trailing spaces, or leave it out")
    if len(value) > POLICY_CHARS:
        raise ServeError(f"reset: policy label of {len(value)} characters: give a name of at most {POLICY_CHARS}")
    if not value.isprintable():
        raise ServeError(f"reset: policy {_shown(value)} has characters that do not print (newline, tab, control): "
                         "give a plain name")
    return value


def _shown(value: Any) -> str:
    return shown(value, 40)


def encode_frames(frames: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {k: encode_array(v) for k, v in frames.items()}


def decode_frames(obj: Any, what: str) -> dict[str, np.ndarray]:
    if not isinstance(obj, dict) or not obj:
        raise ServeError(f"{what}: expected an object camera -> frame array")
    return {str(k): decode_array(v, f"{what}.{k}") for k, v in obj.items()}


@dataclass
class Ended:
    """The answer to `end`: the episode folder the rollout was recorded to, and the judge's verdict on it
    (`serve/judging.py`; None when the server has no judge or nothing was recorded). `success` and
    `progress` are None also when the judge failed: `judge["error"]` says why."""

    recorded: str | None = None
    judge: dict[str, Any] | None = None
    rollout: str | None = None  # the id of the rollout that ended

    @property
    def success(self) -> bool | None:
        return (self.judge or {}).get("success")

    @property
    def progress(self) -> float | None:
        return (self.judge or {}).get("progress")

    def to_json(self) -> dict[str, Any]:
        return {"rollout": self.rollout, "recorded": self.recorded, "judge": self.judge}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Ended":
        return cls(obj.get("recorded"), obj.get("judge"), obj.get("rollout"))
