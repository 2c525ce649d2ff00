"""`Client`: a policy's side of `worldtune serve`, with the standard library's urllib and numpy only.

    from worldtune.serve import Client
    world = Client("http://127.0.0.1:8765")
    obs = world.reset({"exterior_1": frame}, "put the cube in the bowl", seed=0, policy="pi0")  # {camera: [h, w, 3]}
    frames = world.step(policy(obs))                                             # {camera: [K, h, w, 3]}
    ended = world.end()                  # ended.recorded: the episode folder; ended.success, ended.progress: the judge's

A `Client` runs one rollout at a time: `reset` opens it on the server under an id (`client.rollout`) that its
`step`s and `end` send, so several clients (one a thread or process) share a server without mixing rollouts. A
refused request raises `ServeError` with the server's one-line reason; the rollout on the server is unchanged by
it, so the policy may send a corrected chunk. An `end` refused for lack of disk space keeps the rollout: call
`end` again once there is space.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from worldtune.errors import ServeError
from worldtune.serve.protocol import VERSION, Ended, decode_frames, encode_array, encode_frames


class Client:
    def __init__(self, url: str = "http://127.0.0.1:8765", timeout: float = 600.0) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout
        self._info: dict[str, Any] | None = None
        self.rollout: str | None = None  # the id of this client's open rollout

    def info(self) -> dict[str, Any]:
        """The server's model, action width, cameras and frame sizes, fps and sampling settings."""
        info = self._call("GET", "/info")
        if info.get("protocol") != VERSION:
            raise ServeError(f"{self.url} speaks protocol {info.get('protocol')}, this client {VERSION}: use the "
                             "same worldtune version on both sides")
        self._info = info
        return info

    def reset(self, frames: dict[str, np.ndarray] | np.ndarray, instruction: str, seed: int = 0,
              policy: str | None = None) -> dict[str, np.ndarray]:
        """Start a rollout from every camera's first frame [H, W, 3] uint8 (a lone array: the one camera);
        returns the first frames as the model sees them, {camera: [h, w, 3]}. `policy` labels the recording
        (a short name), so rollouts of several policies can share one record folder and be ranked. A rollout this
        client still has open is ended (recorded) first."""
        self.end()
        if isinstance(frames, np.ndarray):
            frames = {"image": frames}
        body: dict[str, Any] = {"frames": encode_frames(frames), "instruction": instruction, "seed": int(seed)}
        if policy is not None:  # only when given: an unlabelled reset is the same request as before labels
            body["policy"] = policy
        answer = self._call("POST", "/reset", body)
        self.rollout = str(answer["rollout"])
        return decode_frames(answer["observation"], "observation")

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        """Send one action chunk [K, D]; returns the K frames it produced for every camera, {camera: [K, h, w, 3]}."""
        if self.rollout is None:
            raise ServeError("step before reset: start a rollout with reset(first frames, instruction, seed)")
        a = np.asarray(actions)
        payload = encode_array(a.astype(np.float32)) if a.dtype.kind in "fiu" else a.tolist()
        answer = self._call("POST", "/step", {"rollout": self.rollout, "actions": payload})
        return decode_frames(answer["frames"], "frames")

    def end(self) -> Ended:
        """End the rollout: `recorded` is the folder it was recorded to (None: not recorded); with a judge on the
        server, `success`, `progress` and `judge` (the whole verdict) score it (None: no judge, or it failed).
        Without an open rollout: an empty `Ended`."""
        if self.rollout is None:
            return Ended()
        ended = Ended.from_json(self._call("POST", "/end", {"rollout": self.rollout}))
        self.rollout = None
        return ended

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            try:
                reason = json.loads(e.read()).get("error") or e.reason
            except ValueError:
                reason = e.reason
            raise ServeError(f"{method} {path}: {reason}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            why = getattr(e, "reason", e)
            raise ServeError(f"no world-model server answers at {self.url} ({why}): start one with "
                             "`worldtune serve CONFIG`") from None
