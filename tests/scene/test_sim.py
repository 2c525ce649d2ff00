"""The scene as a simulator: the dataset's actions replayed draw the dataset's frames, and the rules hold."""

from __future__ import annotations

import numpy as np
import pytest

from worldtune.errors import ConfigError
from worldtune.scene.episode import BOWL_HEIGHT, CLOSED, OPEN, SyntheticEpisode, block_size, demo_episodes
from worldtune.scene.sim import SceneEnv
from worldtune.scene.task import SceneTask
from worldtune.scene.writer import _episode_table


def _replay(ep: SyntheticEpisode, states: np.ndarray) -> tuple[list[list[str]], dict]:
    """Replay `states` (frame 0's, then each step's action) in the env; per frame, the cameras whose image differs
    from the episode's own rendering; and the last info."""
    env = SceneEnv(height=ep.height, width=ep.width, max_steps=ep.length - 1, scene_seed=ep.seed)
    obs, info = env.reset(seed=ep.index, task=ep.task, options={"gripper": states[0]})
    differs = []
    for i in range(ep.length):
        if i:
            obs, _, _, _, info = env.step(states[i])
        ref = ep.render(i)
        differs.append([n for n in ref if not np.array_equal(obs[n], ref[n])])
    return differs, info


def _states(ep: SyntheticEpisode, dtype=np.float64) -> np.ndarray:
    return np.array([[*ep.gripper(i)[0], ep.gripper(i)[1]] for i in range(ep.length)], dtype)


def test_replayed_episodes_draw_the_writers_frames_bit_for_bit():
    """The writer's states replayed as actions give the same pixels in every camera and frame, with the block
    carried by the rules (grasp, carry, release into the bowl or onto a block). The two exceptions are the
    dataset's own: in its shortest episodes the frame that closes the gripper comes after the lift has begun,
    and the dataset still draws the block in the fingers; the simulator's closing gripper is out of reach there,
    so the block stays (frames agree up to that frame, and the task is not done)."""
    eps = (demo_episodes(14, seed=0, height=48, width=80)
           + demo_episodes(4, seed=5, height=48, width=80, place_on="blue", targets=("red", "green")))
    exceptions = []
    for ep in eps:
        differs, info = _replay(ep, _states(ep))
        closes = next(i for i in range(ep.length) if ep.gripper(i)[2])
        g = ep.gripper(closes)[0]
        out_of_reach = g[2] > ep.blocks[ep.target][2]  # the fingers' bottom above the block's middle
        if out_of_reach:
            exceptions.append(ep.index)
            assert not any(differs[:closes]) and all(differs[closes:]), (ep.index, differs)
            assert not info["success"] and info["support"][ep.target] == "table"
        else:
            assert not any(differs), (ep.index, differs)
            assert info["success"] and info["support"][ep.target] == ep.place_on
    assert exceptions == [3, 8]  # the demo's 10-frame episodes


def test_the_written_float32_actions_replay_within_a_few_pixels():
    """Replaying the `action` column the writer stores (float32) moves the gripper by float32 rounding (< 1e-7 m):
    a handful of pixels on edges and texture samples change by one level, nothing more."""
    for ep in demo_episodes(3, seed=0):
        table = _episode_table(ep, 0, 0)
        acts = np.array(table.column("action").to_pylist(), np.float32)
        states = np.concatenate([_states(ep, np.float32)[:1], acts[:-1]])
        env = SceneEnv(max_steps=ep.length - 1, scene_seed=ep.seed)
        obs, _ = env.reset(seed=ep.index, task=ep.task, options={"gripper": states[0]})
        for i in range(1, ep.length):
            obs, _, _, _, info = env.step(states[i])
            for n, ref in ep.render(i).items():
                diff = np.abs(obs[n].astype(int) - ref)
                assert (diff.max(-1) > 0).sum() <= 8 and diff.max() <= 1, (ep.index, i, n)
        assert info["success"]


def _env(task: str = "picks up the red cube and places it in the bowl.", seed: int = 0):
    env = SceneEnv(cameras=())
    _, info = env.reset(seed=seed, task=task)
    return env, info


def _go(env: SceneEnv, xyz, opening: float) -> dict:
    return env.step(np.array([*xyz, opening]))[4]


def test_a_closing_gripper_takes_a_block_within_reach_only():
    env, info = _env()
    red = info["blocks"]["red"]
    _go(env, red + [0.03, 0, -0.025], OPEN)
    assert _go(env, red + [0.03, 0, -0.025], CLOSED)["held"] is None  # 3 cm off: out of reach
    _go(env, red + [0, 0, 0.1], OPEN)
    _go(env, red + [0, 0, 0.1], CLOSED)  # closed in the air...
    assert _go(env, red - [0, 0, 0.025], CLOSED)["held"] is None  # ...and lowered closed: nothing taken
    _go(env, red - [0, 0, 0.025], OPEN)
    info = _go(env, red + [0.01, 0.005, -0.025], CLOSED)
    assert info["held"] == "red" and info["support"]["red"] == "gripper"
    info = _go(env, [0.1, 0.1, 0.3], CLOSED)  # carried, centred between the fingers
    assert np.allclose(info["blocks"]["red"], [0.1, 0.1, 0.3 + block_size("red")])


def _carry(env: SceneEnv, info: dict, name: str, to_xy) -> dict:
    b = info["blocks"][name]
    _go(env, b + [0, 0, 0.2], OPEN)
    _go(env, b - [0, 0, block_size(name)], OPEN)
    assert _go(env, b - [0, 0, block_size(name)], CLOSED)["held"] == name
    _go(env, [*to_xy, 0.2], CLOSED)
    return _go(env, [*to_xy, 0.2], OPEN)


def test_a_released_block_lands_on_what_is_below_it():
    env, info = _env()
    info = _carry(env, info, "red", info["bowl"][:2] + [0.05, 0])
    assert info["support"]["red"] == "bowl" and info["success"]
    assert np.isclose(info["blocks"]["red"][2], BOWL_HEIGHT + block_size("red"))
    info = _carry(env, info, "red", info["bowl"][:2] + [0.08, 0])  # just past the rim: on the table
    assert info["support"]["red"] == "table" and not info["success"]
    assert np.isclose(info["blocks"]["red"][2], block_size("red"))
    blue = info["blocks"]["blue"]
    info = _carry(env, info, "red", blue[:2] + [0.01, -0.01])
    assert info["support"]["red"] == "blue" and np.isclose(info["blocks"]["red"][2], 2 * 0.025 + 0.025)
    assert _go(env, blue - [0, 0, 0.025], OPEN)["held"] is None
    assert _go(env, blue - [0, 0, 0.025], CLOSED)["held"] is None  # a block under another is not picked
    info = _carry(env, info, "green", [0.58, 0.0])  # off the table's edge: onto the floor
    assert info["support"]["green"] == "floor"


def test_stacking_success_and_the_tasks_instruction():
    env, info = _env("picks up the green block and stacks it on the blue cube.", seed=2)
    assert env.task == SceneTask("green", "blue")
    info = _carry(env, info, "green", info["blocks"]["blue"][:2])
    assert info["success"] and env.step(np.array([0, 0, 0.3, OPEN]))[1] == 1.0
    assert SceneTask.parse(env.task.instruction) == env.task


def test_bad_actions_and_tasks_are_named():
    env = SceneEnv(cameras=())
    with pytest.raises(ConfigError, match="before reset"):
        env.step(np.zeros(4))
    with pytest.raises(ConfigError, match="render_views before reset"):
        env.render_views(("exterior_1",))
    env.reset(seed=0, task=SceneTask("red"))
    with pytest.raises(ConfigError, match=r"4 finite numbers \[x, y, z, gripper\]"):
        env.step(np.zeros(3))
    with pytest.raises(ConfigError, match="not one of the scene's instructions"):
        env.reset(seed=0, task="pour the coffee")
    with pytest.raises(ConfigError, match="no place for the red block"):
        SceneTask("red", "red")
    with pytest.raises(ConfigError, match=r"options\['gripper'\] must be 4 finite numbers"):
        env.reset(seed=0, options={"gripper": [0, 0, float("nan"), 0.06]})


def test_a_reset_without_a_seed_takes_the_next_layout():
    env = SceneEnv(cameras=())
    env.reset(seed=5)
    _, info = env.reset()
    _, again = SceneEnv(cameras=()).reset(seed=6)
    assert all(np.array_equal(info["blocks"][n], again["blocks"][n]) for n in info["blocks"])


def test_truncates_after_max_steps_and_clips_the_action():
    env = SceneEnv(cameras=("exterior_1",), max_steps=3)
    obs, _ = env.reset(seed=1)
    assert set(obs) == {"state", "exterior_1_left"} and obs["exterior_1_left"].shape == (96, 160, 3)
    ends = [env.step(np.array([9.0, 0, -1, 0.06]))[3] for _ in range(3)]
    assert ends == [False, False, True]
    assert np.allclose(env.state.gripper, [0.6, 0, 0])


def test_gymnasium_accepts_it():
    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    env = SceneEnv(cameras=("exterior_1_left",), height=24, width=40, max_steps=5)
    assert isinstance(env, gymnasium.Env)
    check_env(env, skip_render_check=True)
