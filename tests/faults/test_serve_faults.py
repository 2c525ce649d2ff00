"""`worldtune serve` attacked as a shared lab service would be: clients that mix, leave, stall or lie.

The model is replaced by a stand-in (`fake_dynamics`: the next frames are the last frame shifted by the actions), so
these tests measure the server, its protocol and its recorder in milliseconds; tests/serve/ runs the real model.
"""

from __future__ import annotations

import errno
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from worldtune.config import load_config
from worldtune.errors import ServeError
from worldtune.serve import Client
from worldtune.serve.protocol import encode_frames

K, D, SIDE = 4, 10, 16  # actions a chunk, the DROID action width, the model frame's side


def fake_dynamics(pipe, first, actions, domain, instruction, *, seed, **_):
    """The stand-in model: K + 1 frames from the first, each shifted by its action's first entry; the seed is
    used as the pipeline uses it (a torch generator), so a seed torch refuses fails here as it would there."""
    torch.Generator().manual_seed(seed)
    steps = [first] + [np.clip(first.astype(np.int16) + int(round(float(a[0]) * 100)), 0, 255).astype(np.uint8)
                       for a in actions]
    return np.stack(steps)


class _Pipe:
    pass


class _FakeSampler:
    """The stand-in model as a chunk sampler: each request through `fake_dynamics`."""

    def run(self, requests):
        return [fake_dynamics(None, r.first_frame, r.actions, r.domain, r.task, seed=r.seed) for r in requests]


def start_fake(monkeypatch, tmp_path: Path, *args: str, dataset: Path | None = None):
    """A served stand-in model on a free loopback port (in a thread); the server and its record folder."""
    from worldtune.serve import server as srv_mod
    from worldtune.serve import world

    monkeypatch.setattr(world, "_load_pipeline", lambda cfg: (_Pipe(), "fake"))
    monkeypatch.setattr(world, "chunk_sampler", lambda pipe, sc: _FakeSampler())
    record = tmp_path / "record"
    size = () if dataset is not None else ("--serve.height", str(SIDE), "--serve.width", str(SIDE))
    cfg = load_config(None, ["--serve.port", "0", "--serve.tier", "256", "--serve.fps", "15", "--serve.chunk_size",
                             str(K), "--serve.record", str(record), *size,
                             *(("--serve.dataset", str(dataset)) if dataset else ()), *args])
    server = srv_mod.start(cfg)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, record


@pytest.fixture
def served(monkeypatch, tmp_path):
    servers = []

    def make(*args: str, dataset: Path | None = None):
        server, record = start_fake(monkeypatch, tmp_path, *args, dataset=dataset)
        servers.append(server)
        return server, record

    yield make
    for s in servers:
        s.shutdown()
        s.close()


def frame(value: int = 90) -> np.ndarray:
    return np.full((SIDE, SIDE, 3), value, np.uint8)


def chunk(value: float) -> np.ndarray:
    return np.full((K, D), value, np.float32)


def episode_table(folder: str | Path):
    """The recorded episode's frame rows (action) beside its episode columns (source/...)."""
    frames = pq.read_table(next((Path(folder) / "data").rglob("*.parquet")))
    episode = pq.read_table(next((Path(folder) / "meta" / "episodes").rglob("*.parquet")))
    for name in episode.column_names:
        if name.startswith("source/"):
            frames = frames.append_column(name, pa.array(episode.column(name).to_pylist() * len(frames)))
    return frames


def raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """(status, answer) of one request, any status."""
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def raw_socket(server, data: bytes, timeout: float = 10) -> tuple[int, dict]:
    """Send bytes as they are (headers a urllib would not send); the status and JSON answer."""
    with socket.create_connection(server.server_address[:2], timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            got = s.recv(65536)
            if not got:
                break
            answer += got
    head, body = answer.split(b"\r\n\r\n", 1)
    return int(head.split()[1]), json.loads(body)


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def outside(tmp_path: Path, record: Path) -> list[Path]:
    """Files written under tmp_path but outside the record folder (a hostile name's escape)."""
    return [p for p in tmp_path.rglob("*") if p.is_file() and record not in p.parents and "dataset" not in p.parts]


# ---------------------------------------------------------------------------------------- 1. names -> paths
def test_camera_keys_from_info_json_never_leave_the_record_folder(served, tmp_path):
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "info.json").write_text(json.dumps({"cameras": {"image": "../../../X"}, "height": SIDE,
                                                   "width": SIDE}))
    server, record = served(dataset=dataset)
    client = Client(server.url)
    client.reset(frame(), "push", seed=0)
    client.step(chunk(0.1))
    recorded = Path(client.end().recorded)
    assert outside(tmp_path, record) == [] and not (tmp_path / "X").exists()
    assert all(recorded in p.resolve().parents for p in recorded.rglob("*"))
    from worldtune.data.lerobot import LeRobotDataset

    ds = LeRobotDataset(recorded)
    assert len(ds.cameras) == 1 and ds.episodes[0].length == 1 + K  # the camera is kept, under a safe name


# ---------------------------------------------------------------------------------------- 3. mixed rollouts
def test_two_clients_rollouts_never_mix(served):
    server, _ = served()
    a, b = Client(server.url), Client(server.url)
    a.reset(frame(), "task a", seed=0, policy="alpha")
    b.reset(frame(), "task b", seed=0, policy="beta")
    a.step(chunk(0.1))
    b.step(chunk(0.2))
    a.step(chunk(0.1))
    ended_a, ended_b = a.end(), b.end()
    assert ended_a.recorded and ended_b.recorded and ended_a.recorded != ended_b.recorded
    for ended, policy, value, chunks in ((ended_a, "alpha", 0.1, 2), (ended_b, "beta", 0.2, 1)):
        t = episode_table(ended.recorded)
        assert set(t.column("source/policy").to_pylist()) == {policy}
        actions = np.stack(t.column("action").to_numpy(zero_copy_only=False))
        assert actions.shape == (1 + chunks * K, D) and np.allclose(actions, value)


def test_step_and_end_need_the_rollout_id_reset_gave(served):
    server, _ = served()
    client = Client(server.url)
    client.reset(frame(), "push", seed=0)
    status, answer = raw(server.url, "POST", "/step", json.dumps({"actions": chunk(0).tolist()}).encode())
    assert status == 400 and "rollout" in answer["error"]
    status, answer = raw(server.url, "POST", "/step", json.dumps({"rollout": "f" * 16, "actions": chunk(0).tolist()})
                         .encode())
    assert status == 404 and "no rollout" in answer["error"]
    client.step(chunk(0.1))  # the rollout is untouched by both
    assert Path(client.end().recorded).is_dir()


# ---------------------------------------------------------------------------------------- 4. disk full
def test_a_recording_that_fails_for_disk_space_is_kept_and_retried_by_end(served, monkeypatch):
    from worldtune.atomic import output_error
    from worldtune.data import lerobot_writer

    server, record = served()
    client = Client(server.url)
    client.reset(frame(), "push", seed=0, policy="pi")
    client.step(chunk(0.1))
    client.step(chunk(0.2))
    finish = lerobot_writer.LeRobotWriter.finish

    def full(self):
        raise output_error(OSError(errno.ENOSPC, "No space left on device"), self.root / "meta" / "info.json")

    monkeypatch.setattr(lerobot_writer.LeRobotWriter, "finish", full)
    with pytest.raises(ServeError, match="disk full.*call end again") as e:
        client.end()
    assert "\n" not in str(e.value) and not list(record.glob("*episode_*"))
    monkeypatch.setattr(lerobot_writer.LeRobotWriter, "finish", finish)  # space freed
    recorded = client.end().recorded
    assert recorded is not None
    t = episode_table(recorded)
    assert len(t) == 1 + 2 * K and set(t.column("source/policy").to_pylist()) == {"pi"}


# ---------------------------------------------------------------------------------------- 5. seeds
@pytest.mark.parametrize("seed", [2 ** 63, 2 ** 64 - 1, 2 ** 70, -1, 1.5, True, "7"])
def test_seeds_out_of_range_are_refused_at_reset(served, seed):
    server, _ = served()
    body = {"frames": encode_frames({"image": frame()}), "instruction": "push", "seed": seed}
    status, answer = raw(server.url, "POST", "/reset", json.dumps(body).encode())
    assert status == 400 and "seed" in answer["error"] and "2^63" in answer["error"], answer


def test_the_largest_seed_rolls_out_and_is_recorded(served):
    server, _ = served()
    client = Client(server.url)
    client.reset(frame(), "push", seed=2 ** 63 - 1)
    client.step(chunk(0.1))
    client.step(chunk(0.1))
    t = episode_table(client.end().recorded)
    assert set(t.column("source/seed").to_pylist()) == {2 ** 63 - 1}


# ---------------------------------------------------------------------------------------- 7. malformed requests
def _reset_bytes(frames: dict) -> bytes:
    return json.dumps({"frames": frames, "instruction": "push", "seed": 0}).encode()


def _post(path: str, body: bytes, length: str | None = None, extra: str = "") -> bytes:
    n = str(len(body)) if length is None else length
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n{extra}\r\n").encode() + body


@pytest.mark.parametrize("request_bytes, status, words", [
    (_post("/reset", b"{}", length="abc"), 400, "Content-Length"),
    (_post("/reset", b"{}", length="-5"), 400, "Content-Length"),
    (b"POST /reset HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 411, "Content-Length"),
    (_post("/reset", _reset_bytes({"image": {"dtype": "uint8", "shape": [0, 0, 3], "data": ""}})), 400, "0x0"),
    (_post("/reset", _reset_bytes({"image": {"dtype": "uint8", "shape": [2 ** 40, 2 ** 40, 3], "data": ""}})),
     400, "bytes of data"),
    (_post("/reset", b"[" * 100000 + b"]" * 100000), 400, "JSON"),
    (_post("/reset", b"{}", length=str(2 << 30)), 413, "limit"),
])
def test_malformed_requests_get_a_4xx_line_and_no_traceback(served, capfd, request_bytes, status, words):
    server, _ = served()
    got, answer = raw_socket(server, request_bytes)
    assert got == status and words in answer["error"] and "\n" not in answer["error"], answer
    assert Client(server.url).info()["model"] == "fake"  # still serving
    assert "Traceback" not in capfd.readouterr().err


def test_the_body_limit_follows_the_frame_size(served):
    server, _ = served()
    info = Client(server.url).info()
    limit = info["max_request_bytes"]
    assert limit < 2 << 20  # 16x16 frames: a few hundred KiB, not gigabytes
    body = _reset_bytes({"image": encode_frames({"image": np.zeros((SIDE * 5, SIDE, 3), np.uint8)})["image"]})
    got, answer = raw_socket(server, _post("/reset", body))
    assert got == 400 and "at most" in answer["error"], answer  # a frame 5x the model's: refused, not resized


def test_a_client_that_leaves_early_costs_one_log_line(served, capfd):
    server, _ = served()
    body = _reset_bytes(encode_frames({"image": frame()}))
    s = socket.create_connection(server.server_address[:2])
    s.sendall(_post("/reset", body)[:-10])  # the body never completes ...
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # ... and the client resets the connection
    time.sleep(0.5)
    err = capfd.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    assert Client(server.url).info()["model"] == "fake"


# ---------------------------------------------------------------------------------------- 8. timeouts
def _request_threads() -> int:
    return sum("process_request" in t.name for t in threading.enumerate())


def test_half_sent_requests_time_out_and_free_their_threads(served):
    server, _ = served("--serve.request_timeout", "0.5")
    socks = []
    for i in range(40):
        s = socket.create_connection(server.server_address[:2])
        s.sendall(_post("/reset", b"{}" * 50)[: 30 + i])  # stalls mid-headers or mid-body
        socks.append(s)
    deadline = time.time() + 5
    most = 0
    while most < 30 and time.time() < deadline:
        most = max(most, _request_threads())
    assert most >= 30, [t.name for t in threading.enumerate()]
    deadline = time.time() + 10
    while _request_threads() and time.time() < deadline:
        time.sleep(0.1)
    assert _request_threads() == 0
    for s in socks:
        s.close()
    assert Client(server.url).info()["model"] == "fake"


def test_an_idle_rollout_is_ended_and_recorded(served):
    server, _ = served("--serve.idle_timeout", "0.5")
    client = Client(server.url)
    client.reset(frame(), "push", seed=0, policy="slow")
    client.step(chunk(0.1))
    time.sleep(1.5)
    assert Client(server.url).info()["rollouts"] == 0
    with pytest.raises(ServeError, match="ended after 0.5 s without a step"):
        client.step(chunk(0.1))
    recorded = client.end().recorded  # the recording the timeout made
    assert recorded and len(episode_table(recorded)) == 1 + K


def test_rollouts_beyond_the_limit_are_refused_not_queued(served):
    server, _ = served("--serve.max_rollouts", "2")
    clients = [Client(server.url) for _ in range(3)]
    clients[0].reset(frame(), "push")
    clients[1].reset(frame(), "push")
    with pytest.raises(ServeError, match="serve.max_rollouts = 2"):
        clients[2].reset(frame(), "push")
    clients[0].end()
    clients[2].reset(frame(), "push")


# ---------------------------------------------------------------------------------------- 9. stale .partial
def test_a_killed_servers_partial_is_cleaned_at_start(served, tmp_path):
    stale = tmp_path / "record" / ".episode_000000.partial" / "meta"
    stale.mkdir(parents=True)
    dataset = tmp_path / "dataset"  # no frame size known until the first reset
    dataset.mkdir()
    (dataset / "info.json").write_text(json.dumps({"fps": 15}))
    served(dataset=dataset)
    assert not stale.parent.exists()


# ---------------------------------------------------------------------------------------- soak
def test_soak_32_clients_50_steps_with_malformed_requests_mixed_in(served):
    """Every rollout recorded whole, with its own policy's actions; every bad request a 4xx; no thread left."""
    server, record = served("--serve.max_rollouts", "32")
    steps, errors, results = 50, [], {}

    def one(i: int) -> None:
        try:
            c = Client(server.url, timeout=120)
            c.reset(frame(i), "push", seed=i, policy=f"p{i:02d}")
            for s in range(steps):
                if s % 10 == 5:  # a malformed request between two good ones
                    bad = [b"{nope", json.dumps({"rollout": c.rollout, "actions": [[1.0] * 3] * K}).encode(),
                           json.dumps({"rollout": "nope", "actions": chunk(0).tolist()}).encode()][s % 3]
                    status, _ = raw(server.url, "POST", "/step", bad)
                    assert 400 <= status < 500
                c.step(chunk(i / 100 + s / 10000))
            results[i] = c.end().recorded
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert len(results) == 32 and len(set(results.values())) == 32
    for i, folder in results.items():
        t = episode_table(folder)
        assert set(t.column("source/policy").to_pylist()) == {f"p{i:02d}"}
        actions = np.stack(t.column("action").to_numpy(zero_copy_only=False))[:, 0]
        want = np.repeat([i / 100 + s / 10000 for s in range(steps)], K)
        assert len(actions) == 1 + steps * K and np.allclose(actions[:-1], want)
    deadline = time.time() + 5
    while _request_threads() and time.time() < deadline:
        time.sleep(0.05)
    assert _request_threads() == 0 and Client(server.url).info()["rollouts"] == 0
