"""`worldtune serve` on `tiny-cosmos3`: a server on 127.0.0.1 (free port, in a thread), a scripted policy through
`Client`, three chunks; frame shapes, the autoregression, determinism under a seed, the recorded LeRobot episode,
malformed requests answered with an error while the rollout goes on, and the gym-style wrapper."""

from __future__ import annotations

import re
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.infer.conftest import random_frames
from worldtune.config import load_config
from worldtune.errors import ServeError
from worldtune.serve import Client, WorldModelEnv

H, W, K, CHUNKS = 64, 112, 4, 3  # a 2x2 grid frame of 32x56 cells; 4 actions a chunk (one latent frame)
ROLES = ("exterior_1", "exterior_2", "wrist")
TASK = "put the red cube in the bowl"
GRID = {"type": "grid", "rows": 2, "cols": 2, "cells": {"exterior_1": [0, 0], "exterior_2": [0, 1], "wrist": [1, 0]},
        "height": H, "width": W}


@pytest.fixture(scope="module")
def server(tiny_cosmos3_dir, tmp_path_factory, one_thread):
    from worldtune.serve.server import start

    record = tmp_path_factory.mktemp("serve") / "episodes"
    cfg = load_config(None, ["--model.path", str(tiny_cosmos3_dir), "--serve.port", "0", "--serve.steps", "2",
                             "--serve.guidance", "1.0", "--serve.tier", "256", "--serve.device", "cpu",
                             "--serve.fps", "15", "--serve.record", str(record), "--serve.chunk_size", str(K),
                             "--serve.layout", _toml(GRID)])
    srv = start(cfg)
    assert srv.server_address[0] == "127.0.0.1"
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.close()


def _toml(d: dict) -> str:
    import json

    return json.dumps(d)


def _first_frames(seed: int = 0) -> dict[str, np.ndarray]:
    return {r: random_frames(1, 90, 160, seed=seed + i)[0] for i, r in enumerate(ROLES)}  # cameras at their own size


def policy(chunk: int) -> np.ndarray:
    """A scripted policy: a slow sweep of the 10-D DROID action."""
    t = np.arange(chunk * K, (chunk + 1) * K, dtype=np.float32)[:, None]
    return (0.1 * np.sin(t / 3 + np.arange(10, dtype=np.float32))).astype(np.float32)


def _through_yuv420p(frames: np.ndarray) -> np.ndarray:
    import av

    return np.stack([av.VideoFrame.from_ndarray(f, format="rgb24").reformat(format="yuv420p").to_ndarray(format="rgb24")
                     for f in frames])


def _rollout(client: Client, seed: int) -> tuple[dict, list[dict], str | None]:
    obs = client.reset(_first_frames(), TASK, seed=seed)
    chunks = [client.step(policy(c)) for c in range(CHUNKS)]
    return obs, chunks, client.end().recorded


def test_a_scripted_policy_rolls_out_and_is_recorded(server):
    from worldtune.data.lerobot import LeRobotDataset

    client = Client(server.url)
    info = client.info()
    assert info["action_width"] == 10 and info["cameras"] == list(ROLES) and info["view_point"] == "concat_view"
    obs, chunks, recorded = _rollout(client, seed=3)
    assert {r: o.shape for r, o in obs.items()} == {r: (32, 56, 3) for r in ROLES}
    for frames in chunks:
        assert {r: f.shape for r, f in frames.items()} == {r: (K, 32, 56, 3) for r in ROLES}
        assert all(f.dtype == np.uint8 for f in frames.values())

    ds = LeRobotDataset(recorded)
    assert len(ds) == 1 and ds.fps == 15
    ep = ds.episodes[0]
    assert ep.length == 1 + CHUNKS * K and ep.task == TASK
    for r in ROLES:
        key = info["camera_keys"][r]
        video = ds.episode_frames(ep, key)
        sent = np.concatenate([obs[r][None]] + [c[r] for c in chunks])
        assert video.shape == sent.shape
        # lossless h264 of the yuv420p frames: what comes back is the frames' own RGB -> yuv420p -> RGB
        np.testing.assert_array_equal(video, _through_yuv420p(sent))
    table = pq.read_table(next((ds.root / "data").rglob("*.parquet")))
    actions = np.stack(table.column("action").to_numpy(zero_copy_only=False))
    want = np.concatenate([policy(c) for c in range(CHUNKS)])
    np.testing.assert_array_equal(actions, np.concatenate([want, want[-1:]]))
    assert table.column("frame_index").to_pylist() == list(range(1 + CHUNKS * K))


def test_the_same_seed_gives_the_same_rollout(server):
    client = Client(server.url)
    a, b, c = (_rollout(client, seed) for seed in (5, 5, 6))
    for x, y in zip(a[1], b[1]):
        assert all(np.array_equal(x[r], y[r]) for r in ROLES)
    assert not all(np.array_equal(x["wrist"], y["wrist"]) for x, y in zip(a[1], c[1]))
    assert a[2] != b[2]  # every rollout its own episode folder


def test_each_chunk_starts_from_the_last_generated_frame(server):
    """Chunk 2 is forward dynamics from chunk 1's last (grid) frame, with the seed advanced by one."""
    from worldtune.infer.dynamics import forward_dynamics

    client, world = Client(server.url), server.world
    client.reset(_first_frames(), TASK, seed=7)
    first = client.step(policy(0))
    last = world.rollouts[client.rollout].streams[0].copy()  # the whole grid frame, whose cells the client got as chunk 1's last
    assert all(np.array_equal(world.cameras.to_cameras([last[None]])[r][0], first[r][-1]) for r in ROLES)
    second = client.step(policy(1))
    client.end()
    video = forward_dynamics(world.pipe, last, policy(1), world.actions.domain, TASK, seed=8, steps=2, guidance=1.0,
                             tier=256, view_point="concat_view", fps=15.0)
    assert np.array_equal(world.cameras.to_cameras([video[1:]])["wrist"], second["wrist"])


@pytest.mark.parametrize("actions, words", [
    (np.zeros((K, 7), np.float32), "takes \\[K, 10\\]"),
    (np.full((K, 10), np.nan, np.float32), "is nan"),
    (np.zeros((K, 10, 1), np.float32), "shape \\[4, 10, 1\\]"),
    (np.zeros((8, 10), np.float32), "chunks of serve.chunk_size = 4"),
    ([["x"] * 10] * K, "nested list of numbers"),
])
def test_a_malformed_action_is_refused_and_the_rollout_goes_on(server, actions, words):
    client = Client(server.url)
    client.reset(_first_frames(), TASK, seed=1)
    with pytest.raises(ServeError, match=words) as e:
        client.step(actions)
    assert "\n" not in str(e.value)
    frames = client.step(policy(0))  # the next valid step still works, as the first chunk of the rollout
    assert frames["wrist"].shape == (K, 32, 56, 3) and server.world.rollouts[client.rollout].chunks == 1
    client.end()


def test_bad_requests_get_one_line_errors(server):
    import json
    import urllib.request

    client = Client(server.url)
    client.end()
    with pytest.raises(ServeError, match="step before reset"):
        client.step(policy(0))
    with pytest.raises(ServeError, match="unknown camera \\['left'\\]"):
        client.reset({"left": _first_frames()["wrist"]}, TASK)
    with pytest.raises(ServeError, match="no frame for camera \\['wrist'\\]"):
        client.reset({r: f for r, f in _first_frames().items() if r != "wrist"}, TASK)
    req = urllib.request.Request(server.url + "/step", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400 and json.loads(e.value.read())["error"] == "the request body is not JSON"
    assert Client(server.url).info()["rollouts"] == 0  # still serving


@pytest.mark.parametrize("label, words", [
    ("x" * 65, "65 characters: give a name of at most 64"),
    ("pi0\nrm -rf", "do not print"),
    ("", "is not a name"),
    (" pi0", "is not a name"),
    (7, "is not a name"),
])
def test_a_bad_policy_label_is_refused_and_the_rollout_goes_on(server, label, words):
    import json
    import urllib.request

    from worldtune.serve.protocol import encode_frames

    client = Client(server.url)
    client.reset(_first_frames(), TASK, seed=1, policy="good")
    body = {"frames": encode_frames(_first_frames()), "instruction": TASK, "seed": 0, "policy": label}
    req = urllib.request.Request(server.url + "/reset", data=json.dumps(body).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    error = json.loads(e.value.read())["error"]
    assert e.value.code == 400 and "\n" not in error and re.search(words, error), error
    assert server.world.rollouts[client.rollout].policy == "good"  # the refused reset left the rollout as it was
    client.step(policy(0))
    assert server.world.rollouts[client.rollout].chunks == 1
    client.end()


@pytest.fixture
def unsized_server(tiny_cosmos3_dir, one_thread, tmp_path):
    """A one-camera server started without a frame size: the first accepted reset fixes it."""
    from worldtune.serve.server import start

    cfg = load_config(None, ["--model.path", str(tiny_cosmos3_dir), "--serve.port", "0", "--serve.steps", "2",
                             "--serve.guidance", "1.0", "--serve.tier", "256", "--serve.device", "cpu",
                             "--serve.fps", "15", "--serve.chunk_size", str(K),
                             "--serve.record", str(tmp_path / "episodes")])
    srv = start(cfg)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.close()


@pytest.mark.parametrize("bad", ["float32", "two channels", "too large"])
def test_a_refused_reset_leaves_the_frame_size_to_the_next_client(unsized_server, bad):
    """A reset refused with 400 (a float32 32x48 frame, a 32x48 frame of two channels, or a 32x1920 frame, longer
    than the size it would fix allows) fixes nothing: the next valid 64x112 client gets 64x112 frames."""
    import json
    import urllib.request

    from worldtune.serve.protocol import encode_frames

    url = unsized_server.url
    wrong = {"float32": random_frames(1, 32, 48, seed=1)[0].astype(np.float32),
             "two channels": random_frames(1, 32, 48, seed=1)[0][..., :2],
             "too large": np.zeros((32, 48 * 40, 3), np.uint8)}[bad]
    body = {"frames": encode_frames({"image": wrong}), "instruction": TASK, "seed": 0}
    req = urllib.request.Request(url + "/reset", data=json.dumps(body).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400, json.loads(e.value.read())
    info = Client(url).info()
    assert info["camera_sizes"] is None and info["tier"] == 256 and info["max_frame_side"] > 64 * 4

    client = Client(url)
    obs = client.reset(random_frames(1, H, W, seed=2)[0], TASK, seed=0)
    assert obs["image"].shape == (H, W, 3)
    assert client.step(policy(0))["image"].shape == (K, H, W, 3)
    assert Client(url).info()["camera_sizes"] == {"image": [H, W]}
    client.end()


def test_gym_style_wrapper(server):
    env = WorldModelEnv(server.url, _first_frames(), TASK, max_chunks=2, seed=3)
    obs, info = env.reset()
    assert set(obs) == set(ROLES) and info["chunk"] == 0
    obs, reward, terminated, truncated, info = env.step(policy(0))
    assert obs["wrist"].shape == (32, 56, 3) and info["frames"]["wrist"].shape == (K, 32, 56, 3)
    assert (reward, terminated, truncated) == (0.0, False, False)
    *_, truncated, info = env.step(policy(1))
    assert truncated and info["chunk"] == 2
    env.close()
    assert len(env.recorded) == 1


def test_no_server_is_a_one_line_error():
    with pytest.raises(ServeError, match="no world-model server answers"):
        Client("http://127.0.0.1:9", timeout=5).info()


def test_a_model_without_action_heads_is_refused_in_one_line(tiny_model_dir):
    from worldtune.errors import ConfigError
    from worldtune.serve.world import load_world

    cfg = load_config(None, ["--model.path", str(tiny_model_dir), "--serve.device", "cpu"])
    with pytest.raises(ConfigError, match="has no Cosmos 3 action heads") as e:
        load_world(cfg)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------- the judge
def _judge(endpoint: str, *overrides: str):
    """A judge built from `[serve.judge]` settings, as `load_world` builds it."""
    from worldtune.serve.judging import rollout_judge

    cfg = load_config(None, ["--serve.judge.endpoint", endpoint, "--serve.judge.backoff", "0.01", *overrides])
    return rollout_judge(cfg.serve.judge)


def _judge_on(monkeypatch, server, endpoint: str, *overrides: str):
    """A judge put on the running server (as `serve.judge.endpoint` in its config would)."""
    judge = _judge(endpoint, *overrides)
    monkeypatch.setattr(server.world, "judge", judge)
    return judge


def _scripted_judge(body: dict) -> str:
    """Answers the success rubric "completed" and the progress rubric "3 of 4", by the rubric's own words."""
    prompt = body["messages"][1]["content"][-1]["text"]
    return "1\nThe cube is in the bowl." if "1 (completed)" in prompt else "**3**\nThe cube is above the bowl."


def _one_chunk(client: Client, seed: int = 0, label: str | None = None):
    client.reset(_first_frames(), TASK, seed=seed, policy=label)
    client.step(policy(0))
    return client.end()


def test_the_judge_scores_every_ended_rollout_and_writes_it_beside_the_episode(server, judge_server, monkeypatch,
                                                                               tmp_path):
    import base64
    import json
    from pathlib import Path

    from worldtune.data.lerobot import LeRobotDataset
    from worldtune.eval.video import read_video

    import pyarrow.parquet as pq

    from worldtune.data.lerobot_writer import EPISODES_PATH
    from worldtune.serve.ranking import read_episode

    judge_server.reply = _scripted_judge
    _judge_on(monkeypatch, server, judge_server.url)
    client = Client(server.url)
    ended = _one_chunk(client, label="pi0-v2")
    assert (ended.success, ended.progress) == (True, 0.75)
    verdict = ended.judge
    # the policy's label: in the verdict, in the episode's metadata, and what the ranking reads back
    assert verdict["policy"] == "pi0-v2"
    assert pq.read_table(Path(ended.recorded) / EPISODES_PATH).column("source/policy").to_pylist() == ["pi0-v2"]
    assert read_episode(Path(ended.recorded)) == ("pi0-v2", (True, 0.75), "")
    assert verdict["rubrics"]["task_success"]["explanation"] == "The cube is in the bowl."
    assert verdict["rubrics"]["task_progress"]["scale"] == [0, 4] and verdict["errors"] == 0
    assert json.loads((Path(ended.recorded) / "judge.json").read_text()) == verdict  # what a ranking script reads

    # what the judge was sent: the instruction under both rubrics, and every camera side by side
    assert len(judge_server.requests) == 2
    ds = LeRobotDataset(ended.recorded)
    cams = [ds.episode_frames(ds.episodes[0], k) for k in ds.camera_keys()]
    assert verdict["cameras"] == ds.camera_keys() and len(cams) == 3
    for body in judge_server.requests:
        parts = body["messages"][1]["content"]
        assert f'instructed to: "{TASK}"' in parts[-1]["text"] and parts[0]["type"] == "video_url"
        (tmp_path / "sent.mp4").write_bytes(base64.b64decode(parts[0]["video_url"]["url"].split(",")[1]))
        sent = read_video(tmp_path / "sent.mp4")[0].astype(float)
        assert sent.shape == (1 + K, 32, 3 * 56, 3)  # 15 fps episode, judged at <= 16 fps: every frame
        for i in range(3):  # each third of the judged video is its camera (through two lossy encodes), no other
            err = [np.abs(sent[..., 56 * i:56 * (i + 1), :] - c).mean() for c in cams]
            assert err[i] < 0.5 * min(e for j, e in enumerate(err) if j != i), err
    # judging the recording later, from its folder alone (the videos read back): the same scores
    again = _judge(judge_server.url)(Path(ended.recorded), TASK)
    assert (again["success"], again["progress"], again["cameras"]) == (True, 0.75, verdict["cameras"])
    assert len(judge_server.requests) == 4

    # a rollout ended by the next reset is judged too, and so is the gym wrapper's at its last chunk
    client.reset(_first_frames(), TASK, seed=1)
    client.step(policy(0))
    client.reset(_first_frames(), TASK, seed=2)
    env = WorldModelEnv(client, _first_frames(), TASK, max_chunks=1, policy="octo")
    assert env.reset()[1]["policy"] == "octo"
    *_, truncated, info = env.step(policy(0))
    assert truncated and (info["success"], info["progress"]) == (True, 0.75) and info["judge"]["errors"] == 0
    assert info["judge"]["policy"] == "octo"
    assert (Path(info["recorded"]) / "judge.json").is_file() and env.ended[-1].judge == info["judge"]
    over = sorted(Path(server.world.record).glob("episode_*"))[-2]  # ended by reset: recorded and judged
    assert json.loads((over / "judge.json").read_text())["success"] is True
    assert pq.read_table(over / EPISODES_PATH).column("source/seed").to_pylist() == [1]
    assert read_episode(over)[0] == "(unlabelled)"  # reset without a label
    assert "source/policy" not in pq.read_table(over / EPISODES_PATH).column_names
    # the gym rollout repeats the first (seed 0, same frames and actions): the same video, answered from the cache
    assert len(judge_server.requests) == 6 and info["judge"]["rubrics"]["task_success"]["status"] == "cached"
    assert client.info()["judge"]["judged"] == 3
    env.close()


def test_a_failing_judge_never_fails_the_rollout_or_its_recording(server, judge_server, monkeypatch):
    import json
    from pathlib import Path

    from worldtune.data.lerobot import LeRobotDataset

    client = Client(server.url)
    judge_server.reply = lambda body: "I cannot tell, maybe 7 or so."  # no score line
    _judge_on(monkeypatch, server, judge_server.url)
    ended = _one_chunk(client)
    assert LeRobotDataset(ended.recorded).episodes[0].length == 1 + K
    assert (ended.success, ended.progress) == (None, None) and ended.judge["errors"] == 2
    assert "no score in the answer" in ended.judge["error"]
    assert json.loads((Path(ended.recorded) / "judge.json").read_text())["error"] == ended.judge["error"]

    # a judge server that answers 500: the breaker opens after 2 failures, spares the next rollout its requests,
    # and once retry_after has passed asks again (the judge is back)
    judge_server.reply, judge_server.fail_first, sent = _scripted_judge, 10 ** 6, len(judge_server.requests)
    judge = _judge_on(monkeypatch, server, judge_server.url, "--serve.judge.retries", "0",
                      "--serve.judge.retry_after", "600")
    first, second = _one_chunk(client), _one_chunk(client)
    assert "HTTP 500" in first.judge["error"] and first.success is None
    assert "judge stopped after 2 failed requests" in second.judge["error"]
    assert len(judge_server.requests) == sent + 2 and judge.failed == 2
    assert LeRobotDataset(second.recorded).episodes[0].length == 1 + K
    judge_server.fail_first = 0
    assert _one_chunk(client).judge["error"] == second.judge["error"]  # still within retry_after: not asked
    judge.judge.retry_after = 0.0  # as if the 600 s had passed
    assert _one_chunk(client).progress == 0.75 and judge.judged == 1 and len(judge_server.requests) == sent + 4

    # nothing listening at all: reported, recorded
    _judge_on(monkeypatch, server, "http://127.0.0.1:9/v1", "--serve.judge.retries", "0")
    ended = _one_chunk(client)
    assert "cannot reach" in ended.judge["error"] and ended.judge["errors"] == 2 and Path(ended.recorded).is_dir()
    assert client.info()["judge"]["failed"] == 1


def test_no_judge_endpoint_means_no_judging(server, tmp_path):
    from pathlib import Path

    from worldtune.errors import ConfigError
    from worldtune.serve.judging import rollout_judge

    assert rollout_judge(load_config(None, []).serve.judge) is None and server.world.judge is None
    ended = _one_chunk(Client(server.url))
    assert ended.judge is None and ended.success is None and Client(server.url).info()["judge"] is None
    assert sorted(p.name for p in Path(ended.recorded).iterdir()) == ["data", "meta", "videos"]
    with pytest.raises(ConfigError, match="serve.record is none") as e:
        load_config(None, ["--serve.judge.endpoint", "http://127.0.0.1:8000/v1", "--serve.record", "none"])
    assert "\n" not in str(e.value)


def test_steps_of_several_rollouts_in_one_batch_equal_lone_steps(server):
    """Two rollouts stepped in one batch (one sampler call) get the chunks that two lone steps give, each from its own
    seed; a step with a bad chunk is refused alone and the other step of its batch goes on."""
    world = server.world
    lone = {}
    for seed in (11, 12):
        rid, _ = world.reset(_first_frames(seed), TASK, seed)
        lone[seed] = world.step(rid, policy(0))
        world.end(rid)
    runs = []
    run = world.sampler.run
    world.sampler.run = lambda requests: runs.append(len(requests)) or run(requests)
    try:
        a, _ = world.reset(_first_frames(11), TASK, 11)
        b, _ = world.reset(_first_frames(12), TASK, 12)
        bad, _ = world.reset(_first_frames(13), TASK, 13)
        results = world.step_many([(a, policy(0)), (bad, np.zeros((K, 7), np.float32)), (b, policy(0))])
    finally:
        world.sampler.run = run
    assert runs == [2 * len(world.rollouts[a].streams)]  # one call for both good steps
    assert isinstance(results[1], ServeError) and "takes [K, 10]" in str(results[1])
    for (frames, chunk), seed in ((results[0], 11), (results[2], 12)):
        assert chunk == 1
        for r in ROLES:
            assert np.abs(frames[r].astype(np.int16) - lone[seed][r]).max() <= 1
    for rid in (a, b, bad):
        world.end(rid)


def test_clients_stepping_at_once_each_get_their_own_chunk(server):
    """Three clients step at the same moment over HTTP (the server may batch them): each gets its own rollout's
    chunk, the one its seed gives alone."""
    clients = [Client(server.url) for _ in range(3)]
    for i, c in enumerate(clients):
        c.reset(_first_frames(20 + i), TASK, seed=20 + i)
    got: dict[int, dict] = {}
    threads = [threading.Thread(target=lambda i=i, c=c: got.__setitem__(i, c.step(policy(0))))
               for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.end()
    for i in range(3):
        solo = Client(server.url)
        solo.reset(_first_frames(20 + i), TASK, seed=20 + i)
        alone = solo.step(policy(0))
        solo.end()
        assert all(np.abs(got[i][r].astype(np.int16) - alone[r]).max() <= 1 for r in ROLES)


@pytest.mark.parametrize("args, words", [
    (["--serve.sampler", "pipeline", "--serve.cuda_graphs", "true"], "apply to serve.sampler"),
    (["--serve.max_batch", "0"], "serve.max_batch must be > 0"),
    (["--serve.batch_window", "-1"], "serve.batch_window must be >= 0"),
])
def test_bad_speed_settings_are_one_line_errors(args, words):
    from worldtune.errors import ConfigError

    with pytest.raises(ConfigError, match=words):
        load_config(None, args)


def test_the_scene_detector_judges_a_served_rollout(server, monkeypatch, tmp_path):
    """`serve.judge.kind = "scene"` on a running server: the rollout's `end` carries the detector's verdict. The
    tiny random model draws no blocks, so the verdict is a failure it could not see (status `undetermined`)."""
    from worldtune.scene.writer import write_demo_dataset
    from worldtune.serve.scene_judge import scene_judge

    root = write_demo_dataset(tmp_path / "ds", episodes=1, workers=1, length=4)
    cfg = load_config(None, ["--serve.judge.kind", "scene", "--serve.judge.cameras", str(root / "meta/cameras.json")])
    monkeypatch.setattr(server.world, "judge", scene_judge(cfg.serve.judge))
    client = Client(server.url)
    client.reset(_first_frames(), "picks up the red cube and places it in the bowl.", seed=0, policy="p")
    client.step(policy(0))
    ended = client.end()
    assert ended.success is False and ended.judge["model"] == "worldtune.scene.detector"
    assert ended.judge["rubrics"]["scene_detector"]["status"] == "undetermined" and ended.judge["errors"] == 0
    assert client.info()["judge"]["kind"] == "scene" and client.info()["judge"]["judged"] == 1
