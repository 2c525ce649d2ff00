"""`worldtune serve`: the world model behind HTTP + JSON on 127.0.0.1, from the standard library's http.server.

Endpoints (bodies and answers are JSON; arrays as in `serve/protocol.py`):

    GET  /info   the model, action domain and width, cameras and their frame sizes, fps, sampling settings, limits
    GET  /health {"ok": true}, answered while a chunk is generated
    POST /reset  {"frames": {camera: [H, W, 3] uint8}, "instruction": str, "seed": int, "policy": str (optional)}
                 -> {"rollout": id, "observation": {camera: [h, w, 3]}}
    POST /step   {"rollout": id, "actions": [K, D] float}  -> {"frames": {camera: [K, h, w, 3]}, "chunk": c}
    POST /end    {"rollout": id} -> {"rollout": id, "recorded": folder or null, "judge": verdict or null}

Several clients share the server: each `reset` opens a rollout of its own under a fresh id, which its `step`s and
`end` name, so no client can step or end another's (up to serve.max_rollouts at once). The model runs one call at
a time; steps of several rollouts that arrive together (within serve.batch_window, or while the model is busy) are
generated in one batch of at most serve.max_batch (`StepBatcher`), each rollout's chunk what a lone step gives. A rollout without a step for serve.idle_timeout seconds is ended and recorded
by the server; a later `end` gets that recording, a later `step` status 410.

A request that is wrong gets a 4xx status and {"error": one line}; the server keeps serving, and the rollout is
untouched, so the next valid request continues it: 400 malformed (JSON, an array, an action of the wrong width,
NaN, a seed outside 0..2^63-1, a bad Content-Length), 404 an unknown rollout, 408 a request not sent within
serve.request_timeout, 409 a step of a rollout waiting to be recorded, 410 a rollout the server ended, 411 no
Content-Length, 413 a body over the limit the frame size gives (`/info` max_request_bytes), 503
serve.max_rollouts open, 507 the recording failed (a full disk): the rollout is kept and the next `end` writes
it. A client that leaves before its answer costs one log line. An unexpected failure is 500 with its one-line
description and the traceback on the server's stderr.

Stopping (Ctrl-C or SIGTERM) records (and, with a judge, scores) every open rollout before the process exits; a
kill -9 loses only those, never a recorded one (`serve/recorder.py`). The judge runs inside `end`, under the
model's lock: /health answers meanwhile, other requests wait for it.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from worldtune.config import WorldtuneConfig
from worldtune.errors import ConfigError, ServeError, WorldtuneError
from worldtune.lock import OutputLock
from worldtune.serve.protocol import Ended, Refused, check_rollout_id, decode_array, decode_frames, encode_frames
from worldtune.serve.recorder import clean_partials
from worldtune.serve.world import WorldModel, load_world

BODY_PIECE = 1 << 16  # bytes read at a time, so that a request's deadline is checked while its body trickles in


class ClientGone(Exception):
    """The client closed or reset its connection: there is no one to answer."""


class _Pending:
    """One step waiting for its batch: what was asked, and (when `done` is set) its result or error."""

    def __init__(self, rid: str, actions: Any) -> None:
        self.rid, self.actions = rid, actions
        self.result: Any = None
        self.done = threading.Event()


class StepBatcher:
    """Steps of several rollouts in one model call: a step joins a queue, waits up to `window` seconds for others,
    then whichever waiting request gets the model lock first generates up to `max_batch` queued steps at once and
    hands every one its result. Steps that arrive while the model is busy queue up, so they batch by themselves."""

    def __init__(self, world: WorldModel, lock: threading.Lock, max_batch: int, window: float) -> None:
        self.world, self.lock, self.max_batch, self.window = world, lock, max_batch, window
        self._queue: list[_Pending] = []
        self._guard = threading.Lock()

    def step(self, rid: str, actions: Any) -> tuple[dict[str, Any], int]:
        """(frames, chunk count) of one step of rollout `rid`; its error raised as the lone step would raise it."""
        item = _Pending(rid, actions)
        with self._guard:
            self._queue.append(item)
        if self.window > 0:
            item.done.wait(self.window)  # let the other clients' steps arrive
        while not item.done.is_set():
            with self.lock:
                if item.done.is_set():
                    break
                with self._guard:
                    batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
                try:
                    results = self.world.step_many([(p.rid, p.actions) for p in batch])
                except BaseException as e:  # a failure of the whole call: every step in it gets the error
                    results = [e] * len(batch)
                for p, r in zip(batch, results):
                    p.result = r
                    p.done.set()
        if isinstance(item.result, BaseException):
            raise item.result
        return item.result


class WorldServer(ThreadingHTTPServer):
    """An HTTP server holding one `WorldModel`; model calls take its lock, so they run one at a time. A watcher
    thread ends idle rollouts; `close` ends the rest and releases the record folder."""

    daemon_threads = True
    request_queue_size = 128  # connections the kernel holds until accepted: many clients connect at once

    def __init__(self, world: WorldModel, host: str, port: int, request_timeout: float = 60.0,
                 lock: OutputLock | None = None) -> None:
        super().__init__((host, port), _Handler)
        self.world, self.lock, self.request_timeout = world, threading.Lock(), request_timeout
        self.batcher = StepBatcher(world, self.lock, world.sc.max_batch, world.sc.batch_window)
        self._folder_lock = lock
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch_idle, name="serve-idle", daemon=True)
        self._watcher.start()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> list[tuple[str, Ended | str]]:
        """Record (and judge) every open rollout, release the port and the record folder; [(id, Ended or why
        it is not recorded)]."""
        self._stop.set()
        with self.lock:
            ended = self.world.end_all()
        self.server_close()
        if self._folder_lock is not None:
            self._folder_lock.__exit__(None, None, None)
            self._folder_lock = None
        return ended

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed outside a request's handling (reset while its request line was read): one
        line, not a traceback; anything else is a bug and keeps its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log(f"client {_peer(client_address)}: {type(error).__name__}; connection closed")
        else:
            super().handle_error(request, client_address)

    def _watch_idle(self) -> None:
        every = min(1.0, self.world.sc.idle_timeout / 4)
        while not self._stop.wait(every):
            with self.lock:
                for rid, ended in self.world.end_idle():
                    what = ended.recorded if isinstance(ended, Ended) else ended
                    log(f"rollout {rid} idle for {self.world.sc.idle_timeout:g} s: ended"
                        + (f", recorded as {what}" if what else ""))


class _Handler(BaseHTTPRequestHandler):
    server: WorldServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.request_timeout  # a stalled or idle connection is closed after this long
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would drown the server's own messages

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") in ("/info", ""):
            with self.server.lock:
                self._reply(HTTPStatus.OK, self.server.world.info())
        elif self.path == "/health":
            self._reply(HTTPStatus.OK, {"ok": True})
        else:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no endpoint GET {self.path}: use /info, /health"})

    def do_POST(self) -> None:  # noqa: N802
        routes = {"/reset": self._reset, "/step": self._step, "/end": self._end}
        route = routes.get(self.path.rstrip("/"))
        try:
            body = self._body()
            if route is None:
                raise Refused(f"no endpoint POST {self.path}: use {', '.join(routes)}", 404)
            if route == self._step:  # the batcher takes the model's lock itself
                answer = route(body)
            else:
                with self.server.lock:
                    answer = route(body)
            self._reply(HTTPStatus.OK, answer)
        except Refused as e:
            self._reply(e.status, {"error": str(e)})
        except WorldtuneError as e:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(e)})
        except ClientGone as e:
            log(f"client {_peer(self.client_address)} left during POST {self.path[:60]} ({e}); nothing answered")
            self.close_connection = True
        except Exception as e:  # a bug: say so in one line, keep the traceback here, keep serving
            traceback.print_exc(file=sys.stderr)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR,
                        {"error": f"internal error {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})

    # ------------------------------------------------------------------ routes
    def _reset(self, body: dict[str, Any]) -> dict[str, Any]:
        frames = decode_frames(body.get("frames"), "frames")
        rid, obs = self.server.world.reset(frames, body.get("instruction", ""), body.get("seed", 0), body.get("policy"))
        return {"rollout": rid, "observation": encode_frames(obs)}

    def _step(self, body: dict[str, Any]) -> dict[str, Any]:
        rid = check_rollout_id(body, "step")
        if "actions" not in body:
            raise ServeError("step: the body has no \"actions\" (a [K, D] array)")
        frames, chunk = self.server.batcher.step(rid, decode_array(body["actions"], "actions"))
        return {"rollout": rid, "frames": encode_frames(frames), "chunk": chunk}

    def _end(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.server.world.end(check_rollout_id(body, "end")).to_json()

    # ------------------------------------------------------------------ plumbing
    def _body(self) -> dict[str, Any]:
        """The request's JSON object, read within serve.request_timeout and the size limit. A request refused
        before its body is read closes the connection (where the next request would start is unknown)."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise Refused("send the body with a Content-Length (chunked transfer is not taken)", 411)
        text = (self.headers.get("Content-Length") or "0").strip()
        if not (text.isascii() and text.isdigit()):
            self.close_connection = True
            raise Refused(f"Content-Length {text[:20]!r} is not a byte count", 400)
        n, limit = int(text), self.server.world.max_request_bytes
        if n > limit:
            self.close_connection = True
            raise Refused(f"request of {n} bytes is over this server's limit of {limit} (frames of at most "
                          f"{self.server.world.max_frame_side} pixels a side): send smaller frames", 413)
        raw = self._read(n) if n else b"{}"
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise Refused("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise Refused("the request body must be a JSON object")
        return body

    def _read(self, n: int) -> bytes:
        deadline = time.monotonic() + self.server.request_timeout
        parts, left = [], n
        try:
            while left:
                if time.monotonic() > deadline:
                    raise TimeoutError
                piece = self.rfile.read(min(left, BODY_PIECE))
                if not piece:
                    raise ClientGone(f"{n - left} of {n} bytes sent")
                parts.append(piece)
                left -= len(piece)
        except TimeoutError:
            self.close_connection = True
            raise Refused(f"the body did not arrive within serve.request_timeout = {self.server.request_timeout:g} s "
                          f"({n - left} of {n} bytes)", 408) from None
        except ConnectionError as e:
            raise ClientGone(type(e).__name__) from None
        return b"".join(parts)

    def _reply(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (ConnectionError, TimeoutError) as e:
            log(f"client {_peer(self.client_address)} left before its answer to {self.command} {self.path[:60]} "
                f"({type(e).__name__})")
            self.close_connection = True


def log(line: str) -> None:
    print(f"worldtune serve: {line}", file=sys.stderr, flush=True)


def _peer(address: Any) -> str:
    return ":".join(map(str, address[:2])) if isinstance(address, tuple) else str(address)


def start(cfg: WorldtuneConfig) -> WorldServer:
    """Take the record folder (one live server per folder; a killed one's `.partial` deleted), load the model and
    bind the port (not yet serving): `serve_forever()` in a thread, `close()` after."""
    from worldtune.console import setting_up

    lock = OutputLock(cfg.serve.record, "serve") if cfg.serve.record is not None else None
    if lock is not None:
        lock.__enter__()
        clean_partials(cfg.serve.record)
    try:
        with setting_up("serve", "loading the model" + (" and its adapter" if cfg.serve.adapter else "")):
            world = load_world(cfg)
        try:
            return WorldServer(world, cfg.serve.host, cfg.serve.port, cfg.serve.request_timeout, lock)
        except OSError as e:
            raise ConfigError(f"cannot listen on {cfg.serve.host}:{cfg.serve.port} ({e.strerror}): choose another "
                              "serve.port (0 = any free one)") from None
    except BaseException:
        if lock is not None:
            lock.__exit__(None, None, None)
        raise


def run(cfg: WorldtuneConfig) -> None:
    """Entry point of `worldtune serve`: serve until Ctrl-C or SIGTERM, then record the running rollout."""
    server = start(cfg)
    w = server.world
    print(f"worldtune serve: {w.model_label}, domain {w.actions.domain.name} ({w.actions.domain.width}-D actions), "
          f"cameras {w.layout.roles} ({w.layout.kind}), {cfg.serve.steps} steps, tier {cfg.serve.tier}; "
          f"recording to {w.record or 'nowhere'}", flush=True)
    if w.judge is not None:
        print(f"judging every recorded rollout with {w.judge.describe()}", flush=True)
    print(f"listening on {server.url} (GET /info, POST /reset /step /end)", flush=True)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        for rid, ended in server.close():
            if isinstance(ended, str):
                print(f"rollout {rid} could not be recorded: {ended}", flush=True)
            elif ended.recorded:
                judged = f"; judge: success {ended.success}, progress {ended.progress}" if ended.judge else ""
                print(f"recorded the running rollout {rid} as {ended.recorded}{judged}", flush=True)
