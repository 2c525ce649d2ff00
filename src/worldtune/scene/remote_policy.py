"""Policies served as VLA labs serve them: openpi's websocket policy protocol, client and server.

Why: a lab's policy (pi0, pi0.5, and others served the openpi way) runs as its own server, often on another
machine, and is asked for action chunks over a websocket. To evaluate such a policy in the scene's simulator
and in a world model (`worldtune.scene.policies.run_episode`, the world-model benchmark), worldtune drives it
through that protocol; and to test the path without a lab's policy, any policy of the scene can be served the
same way.

The protocol (openpi's, as its `openpi-client` package speaks it): one websocket connection per client, binary
messages packed with msgpack, numpy arrays as maps {"__ndarray__": true, "data": raw bytes, "dtype": the
dtype's string, "shape": [...]} (numpy scalars as {"__npgeneric__": true, "data", "dtype"}). On connecting the
server sends its metadata (a map); then each message from the client is an observation (a map of arrays,
numbers and strings; the instruction under "prompt") and the server answers a map with "actions", an array
[H, D] of the next H actions. A text message instead of an answer is the server's error. worldtune speaks it
with `websockets` and `msgpack` (`pip install worldtune[openpi]`): openpi-client itself pins numpy below 2.

What `RemotePolicy` sends: every camera frame of the observation under `image_key` ("observation/{camera}"),
the state under "observation/state" when the env gives one, the instruction under "prompt", and, for a server
that wraps one of the scene's scripted policies (which read the layout, not the pixels), the step's facts
under "worldtune/info" with the policy's random state at reset under "worldtune/rng" (so a served scripted
policy draws what it would draw in process) and "worldtune/reset" on an episode's first request. A lab's policy
ignores those keys. It asks for a new chunk when the last one is spent, as openpi's own action-chunk broker
does: the actions of a chunk are open loop.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any, Callable

import numpy as np

from worldtune.errors import ConfigError, ServeError
from worldtune.scene.task import SceneTask

IMAGE_KEY = "observation/{camera}"


def _modules():
    """websockets and msgpack, with the install line when they are missing."""
    try:
        import msgpack
        import websockets.sync.client
        import websockets.sync.server
    except ImportError as e:
        raise ConfigError(f"an openpi websocket policy needs `websockets` and `msgpack` ({e.name} is missing): "
                          "pip install 'worldtune[openpi]'") from None
    return msgpack, websockets


# ---------------------------------------------------------------------------------------- the wire format
def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "OVc":
            raise ValueError(f"an array of dtype {obj.dtype} cannot be sent (numbers and booleans only)")
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a {type(obj).__name__} to a policy server")


def _unpack_hook(obj: dict) -> Any:
    if b"__ndarray__" in obj:
        return np.frombuffer(obj[b"data"], dtype=np.dtype(obj[b"dtype"])).reshape(obj[b"shape"])
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    """msgpack bytes of `obj`, numpy arrays in openpi's form."""
    msgpack, _ = _modules()
    return msgpack.packb(obj, default=_pack_default)


def unpackb(data: bytes) -> Any:
    """The object of msgpack bytes in openpi's form (arrays read-only views of the message)."""
    msgpack, _ = _modules()
    return msgpack.unpackb(data, object_hook=_unpack_hook)


def _plain(value: Any) -> Any:
    """`value` as msgpack can carry it: maps, lists, numbers, strings and arrays; anything else as its text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str, np.ndarray, np.generic)):
        return value
    if isinstance(value, SceneTask):
        return value.instruction
    return str(value)


# ---------------------------------------------------------------------------------------- the client
class RemotePolicy:
    """A policy served over openpi's websocket protocol, as the scene's rollout loop drives a policy."""

    def __init__(self, url: str, name: str | None = None, image_key: str = IMAGE_KEY, timeout: float = 60.0) -> None:
        _, websockets = _modules()
        self.url = url if url.startswith(("ws://", "wss://")) else f"ws://{url}"
        self.image_key, self.timeout = image_key, timeout
        try:
            self._ws = websockets.sync.client.connect(self.url, compression=None, max_size=None,
                                                      open_timeout=timeout)
            self.metadata: dict[str, Any] = _decode_keys(unpackb(self._ws.recv(timeout=timeout)))
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as e:
            raise ServeError(f"policy server {self.url}: cannot connect ({e}); start the policy server first, or "
                             "fix the address (ws://host:port)") from None
        self.name = name or str(self.metadata.get("policy") or self.url)
        self._chunk: list[np.ndarray] = []
        self._task: SceneTask | None = None
        self._rng_state: str | None = None
        self._fresh = True

    def reset(self, task: SceneTask, info: dict[str, Any], rng: np.random.Generator) -> None:
        """A new episode: the next request carries the reset flag, the task and the random state."""
        self._task, self._chunk, self._fresh = task, [], True
        self._rng_state = json.dumps(rng.bit_generator.state)

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> np.ndarray:
        """The next action of the served chunk; a new chunk asked for when it is spent."""
        if not self._chunk:
            self._chunk = list(self.infer(self.observation(obs, info)))
            if not self._chunk:
                raise ServeError(f"policy server {self.url} answered an empty action chunk")
        return np.asarray(self._chunk.pop(0), np.float64)

    def observation(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> dict[str, Any]:
        """The request: frames, state, prompt, and the scene's facts for a served scripted policy."""
        out: dict[str, Any] = {self.image_key.format(camera=k): v for k, v in obs.items()
                               if isinstance(v, np.ndarray) and v.ndim == 3}
        if isinstance(obs.get("state"), np.ndarray):
            out["observation/state"] = obs["state"]
        out["prompt"] = str(info.get("instruction") or (self._task.instruction if self._task else ""))
        out["worldtune/info"] = _plain({k: v for k, v in info.items() if k != "frames"})
        out["worldtune/task"] = self._task.instruction if self._task else None
        out["worldtune/rng"] = self._rng_state
        out["worldtune/reset"] = self._fresh
        self._fresh = False
        return out

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """One round trip: the observation out, the action chunk [H, D] back."""
        _, websockets = _modules()
        try:
            self._ws.send(packb(observation))
            answer = self._ws.recv(timeout=self.timeout)
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as e:
            raise ServeError(f"policy server {self.url}: the connection failed mid-episode ({e}); restart the "
                             "server and rerun") from None
        if isinstance(answer, str):
            raise ServeError(f"policy server {self.url} failed: {answer.strip().splitlines()[-1] if answer else ''}")
        reply = _decode_keys(unpackb(answer))
        actions = np.asarray(reply.get("actions", []), np.float64) if isinstance(reply, dict) else np.empty(0)
        if actions.ndim != 2:
            raise ServeError(f"policy server {self.url}: the answer has no 'actions' array [H, D] "
                             f"(keys {sorted(reply) if isinstance(reply, dict) else type(reply).__name__})")
        return actions

    def close(self) -> None:
        self._ws.close()


def _decode_keys(obj: Any) -> Any:
    """Byte-string map keys (a server packing with use_bin_type=False) as text."""
    if isinstance(obj, dict):
        return {(k.decode() if isinstance(k, bytes) else k): _decode_keys(v) for k, v in obj.items()}
    return obj


# ---------------------------------------------------------------------------------------- the server
class PolicyServer:
    """One of the scene's policies (any object of its `Policy` protocol) served over openpi's protocol: each
    connection gets its own copy (the scripted policies keep an episode's plan), each request `horizon` actions
    asked of it open loop from the request's step. Runs in a thread; `url` once started."""

    def __init__(self, policy: Any, host: str = "127.0.0.1", port: int = 0, horizon: int = 16,
                 metadata: dict[str, Any] | None = None) -> None:
        _, websockets = _modules()
        if horizon < 1:
            raise ConfigError(f"PolicyServer: horizon = {horizon}; a chunk has at least one action")
        self.policy, self.horizon = policy, horizon
        self.metadata = {"policy": policy.name, "action_horizon": horizon, **(metadata or {})}
        self._server = websockets.sync.server.serve(self._handle, host, port, compression=None, max_size=None)
        self.port = self._server.socket.getsockname()[1]
        self.url = f"ws://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> PolicyServer:
        self._thread.start()
        return self

    def shutdown(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _handle(self, ws) -> None:
        policy = copy.deepcopy(self.policy)
        ws.send(packb(self.metadata))
        for message in ws:
            try:
                answer = packb({"actions": self._chunk(policy, _decode_keys(unpackb(message)))})
            except Exception as e:  # noqa: BLE001 - the protocol reports a server's error as a text message
                ws.send(f"{type(e).__name__}: {e}")
                continue
            ws.send(answer)

    def _chunk(self, policy: Any, obs: dict[str, Any]) -> np.ndarray:
        info = obs.get("worldtune/info")
        if not isinstance(info, dict) or "step" not in info:
            raise ValueError("the observation has no 'worldtune/info' with the step: this server wraps a scene "
                             "policy, which reads the scene's facts (drive it with worldtune's RemotePolicy)")
        if obs.get("worldtune/reset"):
            policy.reset(SceneTask.parse(obs.get("worldtune/task") or obs["prompt"]), info,
                         _rng(obs.get("worldtune/rng")))
        frames = {k: v for k, v in obs.items() if isinstance(v, np.ndarray) and v.ndim == 3}
        return np.stack([np.asarray(policy.act(frames, {**info, "step": int(info["step"]) + i}), np.float64)
                         for i in range(self.horizon)])


def _rng(state: str | None) -> np.random.Generator:
    """The client's random state at reset, so a served policy draws what it would in process."""
    rng = np.random.default_rng()
    if state:
        rng.bit_generator.state = json.loads(state)
    return rng


def remote_policies(specs: tuple[str, ...] | list[str], connect: Callable[..., RemotePolicy] = RemotePolicy
                    ) -> list[RemotePolicy]:
    """Policies from "name=ws://host:port" specs (the benchmark's --remote)."""
    out = []
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise ConfigError(f"remote policy {spec!r}: write it as NAME=ws://host:port")
        out.append(connect(url.strip(), name.strip()))
    return out
