"""`worldtune serve`: the world model behind HTTP + JSON on 127.0.0.1, from the standard library's http.server.

Endpoints (bodies and answers are JSON; arrays as in `serve/protocol.py`):

    GET  /info   the model, action domain and width, cameras and their frame sizes, fps, sampling settings
    POST /reset  {"frames": {camera: [H, W, 3] uint8}, "instruction": str, "seed": int, "policy": str (optional)}
                 -> {"observation": {camera: [h, w, 3]}, "episode_active": true}
    POST /step   {"actions": [K, D] float}  -> {"frames": {camera: [K, h, w, 3]}, "chunk": c}
    POST /end    -> {"recorded": folder or null, "judge": the judge's verdict or null (serve/judging.py)}

A request that is wrong (malformed JSON, an action of the wrong width, NaN, a step before reset) gets status
400 (409 for the order) and {"error": one line}; the server keeps serving, and the rollout is untouched, so
the next valid step continues it. An unexpected failure is 500 with its one-line description and the
traceback on the server's stderr. Requests are served one at a time (the model is one rollout); a second
client's reset ends and records the first client's rollout.

Stopping (Ctrl-C or SIGTERM) records (and, with a judge, scores) the running rollout before the process exits;
a kill -9 loses only that rollout, never a recorded one (`serve/recorder.py`). The judge runs inside `end`,
under the model's lock: /health answers meanwhile, other requests wait for it.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from worldtune.config import WorldtuneConfig
from worldtune.errors import ServeError, WorldtuneError
from worldtune.serve.protocol import Ended, decode_array, decode_frames, encode_frames
from worldtune.serve.world import WorldModel, load_world

MAX_BODY = 2 << 30  # bytes; a request larger than this is refused before it is read


class WorldServer(ThreadingHTTPServer):
    """An HTTP server holding one `WorldModel`; requests take its lock, so they run one at a time."""

    daemon_threads = True

    def __init__(self, world: WorldModel, host: str, port: int) -> None:
        super().__init__((host, port), _Handler)
        self.world, self.lock = world, threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> Ended:
        """Record (and judge) the running rollout and release the port."""
        with self.lock:
            ended = self.world.end()
        self.server_close()
        return ended


class _Handler(BaseHTTPRequestHandler):
    server: WorldServer
    protocol_version = "HTTP/1.1"

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
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no endpoint POST {self.path}: use {', '.join(routes)}"})
                return
            with self.server.lock:
                answer = route(body)
            self._reply(HTTPStatus.OK, answer)
        except ServeError as e:
            status = HTTPStatus.CONFLICT if str(e).startswith("step before reset") else HTTPStatus.BAD_REQUEST
            self._reply(status, {"error": str(e)})
        except WorldtuneError as e:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(e)})
        except Exception as e:  # a bug: say so in one line, keep the traceback here, keep serving
            traceback.print_exc(file=sys.stderr)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR,
                        {"error": f"internal error {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})

    # ------------------------------------------------------------------ routes
    def _reset(self, body: dict[str, Any]) -> dict[str, Any]:
        frames = decode_frames(body.get("frames"), "frames")
        obs = self.server.world.reset(frames, body.get("instruction", ""), body.get("seed", 0), body.get("policy"))
        return {"observation": encode_frames(obs), "episode_active": True}

    def _step(self, body: dict[str, Any]) -> dict[str, Any]:
        if "actions" not in body:
            raise ServeError("step: the body has no \"actions\" (a [K, D] array)")
        frames = self.server.world.step(decode_array(body["actions"], "actions"))
        return {"frames": encode_frames(frames), "chunk": self.server.world.rollout.chunks}

    def _end(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.server.world.end().to_json()

    # ------------------------------------------------------------------ plumbing
    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.close_connection = True
            raise ServeError(f"request of {n} bytes is over the {MAX_BODY} limit: send smaller frames")
        raw = self.rfile.read(n) if n else b"{}"
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ServeError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise ServeError("the request body must be a JSON object")
        return body

    def _reply(self, status: HTTPStatus, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def start(cfg: WorldtuneConfig) -> WorldServer:
    """Load the model and bind the port (not yet serving): `serve_forever()` in a thread, `close()` after."""
    from worldtune.console import setting_up

    with setting_up("serve", "loading the model" + (" and its adapter" if cfg.serve.adapter else "")):
        world = load_world(cfg)
    try:
        return WorldServer(world, cfg.serve.host, cfg.serve.port)
    except OSError as e:
        from worldtune.errors import ConfigError

        raise ConfigError(f"cannot listen on {cfg.serve.host}:{cfg.serve.port} ({e.strerror}): choose another "
                          "serve.port (0 = any free one)") from None


def run(cfg: WorldtuneConfig) -> None:
    """Entry point of `worldtune serve`: serve until Ctrl-C or SIGTERM, then record the running rollout."""
    server = start(cfg)
    w = server.world
    print(f"worldtune serve: {w.model_label}, domain {w.actions.domain.name} ({w.actions.domain.width}-D actions), "
          f"cameras {w.layout.roles} ({w.layout.kind}), {cfg.serve.steps} steps, tier {cfg.serve.tier}; "
          f"recording to {w.record or 'nowhere'}", flush=True)
    if w.judge is not None:
        print(f"judging every recorded rollout with {w.judge.judge.model} at {w.judge.judge.endpoint} "
              f"(rubrics {', '.join(r.name for r in w.judge.judge.rubric_list)})", flush=True)
    print(f"listening on {server.url} (GET /info, POST /reset /step /end)", flush=True)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        ended = server.close()
        if ended.recorded:
            judged = f"; judge: success {ended.success}, progress {ended.progress}" if ended.judge else ""
            print(f"recorded the running rollout as {ended.recorded}{judged}", flush=True)
