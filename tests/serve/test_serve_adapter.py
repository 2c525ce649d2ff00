"""`worldtune serve` with a forward-dynamics adapter (LoRA + a new domain's action rows + its normalisation, as
`worldtune export` writes it): the server runs the adapter's domain, scales the policy's raw actions as the adapter
was trained, and each chunk equals `forward_dynamics` on a pipeline with the adapter loaded by hand."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from tests.infer.conftest import random_frames
from worldtune.config import LoraConfig, load_config
from worldtune.errors import ConfigError
from worldtune.models.cosmos3_domains import ActionDomain
from worldtune.serve import Client

H, W, K, FPS, TIER = 64, 112, 4, 15.0, 256
DOMAIN = ActionDomain("test_arm_4d", 31, 4, new=True)
STATS = {"q01": [-2.0, -1.0, 0.0, -0.5], "q99": [2.0, 3.0, 1.0, 0.5], "mean": [0.0] * 4, "std": [1.0] * 4,
         "min": [-3.0] * 4, "max": [3.0] * 4, "count": 100}
TASK = "open the drawer"


@pytest.fixture(scope="module")
def adapter(tiny_cosmos3_dir, tmp_path_factory):
    """A LoRA on the generator targets and trained-looking rows for slot 31, with the facts of its training."""
    from diffusers import Cosmos3OmniTransformer

    from worldtune.models.cosmos3_actions import train_domain_rows
    from worldtune.models.family import family_of
    from worldtune.models.load import fingerprint
    from worldtune.models.registry import get_spec
    from worldtune.train.adapters import apply_training_mode
    from worldtune.train.export import save_adapter

    spec = get_spec("tiny-cosmos3")
    tr = Cosmos3OmniTransformer.from_pretrained(tiny_cosmos3_dir, subfolder="transformer")
    base_fp = fingerprint(tr)
    params = apply_training_mode(tr, "lora", LoraConfig(rank=4, alpha=8.0), family_of(spec))
    params += train_domain_rows(tr, DOMAIN.id)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    info = {"task": "forward_dynamics", "domain": DOMAIN.to_dict(), "normalization": "quantile", "stats": STATS,
            "names": ["x", "y", "z", "grip"], "width": 4, "key": "action", "chunk_size": K, "fps": FPS, "tier": TIER,
            "canvas": [192, 320], "view_point": "ego_view", "rows_file": "action_domain.safetensors"}
    out = tmp_path_factory.mktemp("fd_adapter") / "fd"
    save_adapter(out, tr, spec, base_fp, action=info)
    return out


@pytest.fixture(scope="module")
def server(tiny_cosmos3_dir, adapter, tmp_path_factory, one_thread):
    from worldtune.serve.server import start

    cfg = load_config(None, ["--model.path", str(tiny_cosmos3_dir), "--serve.port", "0", "--serve.steps", "2",
                             "--serve.guidance", "1.0", "--serve.device", "cpu", "--serve.adapter", str(adapter),
                             "--serve.record", str(tmp_path_factory.mktemp("rec") / "episodes")])
    srv = start(cfg)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.close()


def test_the_adapter_drives_the_served_model(server, adapter, tiny_cosmos3_dir):
    from worldtune.data.actions import normalize
    from worldtune.infer.dynamics import forward_dynamics
    from worldtune.models.cosmos3_actions import load_action_adapter_rows
    from worldtune.models.load import load_pipeline

    client = Client(server.url)
    info = client.info()
    assert info["domain"] == DOMAIN.to_dict() and info["action_names"] == ["x", "y", "z", "grip"]
    assert (info["tier"], info["fps"], info["view_point"], info["normalization"]) == (TIER, FPS, "ego_view", "quantile")
    frame = random_frames(1, H, W, seed=2)[0]
    raw = np.array([[1.0, 2.0, 0.5, 0.25]] * K, np.float32) * np.linspace(0.5, 1, K, dtype=np.float32)[:, None]
    client.reset(frame, TASK, seed=4)
    served = client.step(raw)["image"]
    client.end()

    pipe, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")  # the adapter loaded by hand
    pipe.set_progress_bar_config(disable=True)
    kw = dict(seed=4, steps=2, guidance=1.0, tier=TIER, view_point="ego_view", fps=FPS)
    scaled = np.asarray(normalize(raw.astype(np.float64), STATS, "quantile"), np.float32)
    base_robot = forward_dynamics(pipe, frame, scaled, DOMAIN, TASK, **kw)  # slot 31 before the adapter
    pipe.transformer.load_lora_adapter(str(adapter), weight_name="pytorch_lora_weights.safetensors",
                                      prefix="transformer", adapter_name="fd")
    assert load_action_adapter_rows(pipe.transformer, adapter) == DOMAIN
    by_hand = forward_dynamics(pipe, frame, scaled, DOMAIN, TASK, **kw)
    np.testing.assert_array_equal(served, by_hand[1:])
    assert not np.array_equal(served, base_robot[1:])
    unscaled = forward_dynamics(pipe, frame, raw, DOMAIN, TASK, **kw)  # the server did scale the actions
    assert not np.array_equal(served, unscaled[1:])


def test_one_loop_runs_a_scripted_policy_in_the_simulator_and_the_served_world_model(server):
    """`run_episode` drives the scene's simulator and the served world model through the same gymnasium calls: a
    noisy scripted policy (its noise drawn from the episode's seed) sends the same action chunks to both, the world
    model starting from the simulator's first frame and knowing what the policy knew there (`start_facts`)."""
    from worldtune.scene.policies import Noisy, run_episode
    from worldtune.scene.sim import SceneEnv, start_facts
    from worldtune.scene.task import SceneTask
    from worldtune.serve import WorldModelEnv

    options = {"instruction": SceneTask("red").instruction, "policy": "noisy"}
    sim = SceneEnv(cameras=("exterior_1_left",), height=H, width=W, max_steps=2 * K)
    sim_info, sim_sent = run_episode(sim, Noisy("noisy", sigma=0.01), 5, options, chunk=K)
    obs, start = sim.reset(seed=5, options=options)
    world = WorldModelEnv(server.url, {"image": obs["exterior_1_left"]}, "", max_chunks=2)
    wm_info, wm_sent = run_episode(world, Noisy("noisy", sigma=0.01), 5, {**options, "facts": start_facts(start)},
                                   chunk=K)
    assert len(sim_sent) == len(wm_sent) == 2 and sim_info["step"] == wm_info["step"] == 2 * K
    np.testing.assert_array_equal(np.stack(sim_sent), np.stack(wm_sent))
    assert not np.array_equal(sim_sent[0][0, :3], sim_sent[0][1, :3])  # the arm moves: real actions, not a constant
    assert wm_info["recorded"] and world.ended[-1].rollout and "success" in sim_info
    sim.reset(seed=5, options=options)
    with pytest.raises(ConfigError, match="chunk"):  # a chunk of the wrong width is refused in the simulator too
        sim.step(np.zeros((K, 3)))


def test_a_policy_served_over_openpis_protocol_runs_in_the_served_world_model(server):
    """The benchmark's path for a lab's policy: a scripted policy behind a websocket policy server (openpi's
    protocol), driven by `RemotePolicy` through the same `run_episode` in the served world model, sends the chunks
    the policy sends in process, and the rollout is recorded under its name."""
    pytest.importorskip("websockets", reason="the openpi protocol needs websockets (pip install 'worldtune[openpi]')")
    pytest.importorskip("msgpack", reason="the openpi protocol needs msgpack (pip install 'worldtune[openpi]')")
    from worldtune.scene.policies import Noisy, run_episode
    from worldtune.scene.remote_policy import PolicyServer, RemotePolicy
    from worldtune.scene.sim import SceneEnv, start_facts
    from worldtune.scene.task import SceneTask
    from worldtune.serve import WorldModelEnv

    options = {"instruction": SceneTask("blue").instruction, "policy": "noisy-remote"}
    sim = SceneEnv(cameras=("exterior_1_left",), height=H, width=W, max_steps=2 * K)
    obs, start = sim.reset(seed=6, options=options)
    world = WorldModelEnv(server.url, {"image": obs["exterior_1_left"]}, "", max_chunks=2)
    facts = {**options, "facts": start_facts(start)}
    _, local = run_episode(world, Noisy("noisy", sigma=0.01), 6, facts, chunk=K)
    with PolicyServer(Noisy("noisy", sigma=0.01), horizon=K) as policy_server:
        remote = RemotePolicy(policy_server.url)
        info, sent = run_episode(world, remote, 6, facts, chunk=K)
        remote.close()
    np.testing.assert_array_equal(np.stack(sent), np.stack(local))
    assert info["recorded"] and info["step"] == 2 * K and world.ended[-1].rollout
