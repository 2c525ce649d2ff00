"""Policies over openpi's websocket protocol: a scripted policy served by a local server of that protocol runs
through the same loop, in the simulator, exactly as it runs in process; and openpi's own client reads the server."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("websockets", reason="the openpi protocol needs websockets (pip install 'worldtune[openpi]')")
pytest.importorskip("msgpack", reason="the openpi protocol needs msgpack (pip install 'worldtune[openpi]')")

from worldtune.errors import ConfigError, ServeError  # noqa: E402
from worldtune.scene.policies import panel, run_episode  # noqa: E402
from worldtune.scene.remote_policy import PolicyServer, RemotePolicy, packb, remote_policies, unpackb  # noqa: E402
from worldtune.scene.sim import SceneEnv  # noqa: E402


def test_the_wire_format_is_openpis_msgpack_numpy():
    """Arrays travel as {"__ndarray__", "data", "dtype", "shape"} maps of raw bytes: read back bit for bit, and
    the map is what openpi's client packs (checked by hand here: a msgpack map with those four keys)."""
    import msgpack

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    obj = {"actions": a, "n": np.int64(3), "prompt": "x"}
    back = unpackb(packb(obj))
    assert back["actions"].dtype == np.float32 and np.array_equal(back["actions"], a)
    assert back["n"] == 3 and isinstance(back["n"], np.int64) and back["prompt"] == "x"
    raw = msgpack.unpackb(packb({"a": a}))["a"]
    assert raw[b"__ndarray__"] is True and raw[b"dtype"] == "<f4" and list(raw[b"shape"]) == [3, 4]
    assert raw[b"data"] == a.tobytes()
    with pytest.raises(ValueError, match="dtype object"):
        packb({"bad": np.array([object()])})


@pytest.mark.parametrize("name, horizon, chunk", [("expert", 16, 16), ("noisy-0.02", 16, 16),
                                                  ("early-release", 10, 4)])
def test_a_served_scripted_policy_runs_as_it_runs_in_process(name, horizon, chunk):
    """The same `run_episode`, the same seeds: the served policy sends exactly the actions the policy sends in
    process (its random draws included, as the client hands over the random state) and the outcomes agree; a
    server horizon other than the loop's chunk is bridged by the client's chunk buffer."""
    policy = next(p for p in panel() if p.name == name)
    env = SceneEnv(cameras=("exterior_1_left",), height=48, width=80, max_steps=32)
    with PolicyServer(policy, horizon=horizon) as server:
        remote = RemotePolicy(server.url)
        assert remote.name == name and remote.metadata["action_horizon"] == horizon
        for seed in (3, 4, 5):
            options = {"instruction": "picks up the red cube and places it in the bowl."}
            local_end, local = run_episode(env, policy, seed, options, chunk)
            remote_end, sent = run_episode(env, remote, seed, options, chunk)
            assert np.array_equal(np.concatenate(sent), np.concatenate(local)), (name, seed)
            assert remote_end["success"] == local_end["success"]
        remote.close()


def test_server_errors_and_unreachable_servers_are_one_line_errors():
    with PolicyServer(panel()[0]) as server:
        remote = RemotePolicy(server.url)
        with pytest.raises(ServeError, match="failed: ValueError: the observation has no 'worldtune/info'"):
            remote.infer({"prompt": "picks up the red cube and places it in the bowl."})
        remote.close()
        port = server.port
    with pytest.raises(ServeError, match=f"ws://127.0.0.1:{port}: cannot connect .*start the policy server"):
        RemotePolicy(f"127.0.0.1:{port}", timeout=5)
    with pytest.raises(ConfigError, match="NAME=ws://host:port"):
        remote_policies(["ws://127.0.0.1:1"])


def test_openpis_own_client_reads_the_server():
    """openpi-client's WebsocketClientPolicy (when installed) gets the metadata and an action chunk from the server."""
    client = pytest.importorskip("openpi_client.websocket_client_policy",
                                 reason="openpi-client is not installed (it pins numpy < 2)")
    env = SceneEnv(cameras=(), max_steps=32)
    _, info = env.reset(seed=3, options={"instruction": "picks up the red cube and places it in the bowl."})
    with PolicyServer(panel()[0], horizon=8) as server:
        remote = RemotePolicy(server.url)
        remote.reset(env.task, info, np.random.default_rng(0))
        request = remote.observation({}, info)
        ours = remote.infer(request)
        remote.close()
        theirs = client.WebsocketClientPolicy(server.url)
        assert theirs.get_server_metadata()["policy"] == "expert"
        request["worldtune/reset"] = True
        assert np.array_equal(np.asarray(theirs.infer(request)["actions"]), ours)
