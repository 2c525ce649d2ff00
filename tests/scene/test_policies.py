"""The scripted policies: the expert is the dataset's script, and the panel's success rates are graded."""

from __future__ import annotations

import numpy as np

from worldtune.scene.episode import demo_episodes
from worldtune.scene.policies import Scripted, panel, rollout
from worldtune.scene.sim import SceneEnv
from worldtune.scene.task import SceneTask


def test_the_expert_commands_the_datasets_own_actions():
    """On a dataset episode's layout and length, the expert's actions are the episode's recorded next states,
    and it does the task (bowl and stacking)."""
    eps = demo_episodes(4, seed=0, length=31) + demo_episodes(2, seed=5, length=31, place_on="blue", targets=("red",))
    for ep in eps:
        env = SceneEnv(cameras=(), max_steps=ep.length - 1, scene_seed=ep.seed)
        obs, info = env.reset(seed=ep.index, task=ep.task)
        expert = Scripted()
        expert.reset(env.task, info, np.random.default_rng(0))
        for i in range(ep.length - 1):
            a = expert.act(obs, info)
            g, opening, _ = ep.gripper(i + 1)
            assert np.array_equal(a, [*g, opening]), (ep.index, i)
            obs, _, _, _, info = env.step(a)
        assert info["success"]


def _rates(seeds: range) -> dict[str, float]:
    env = SceneEnv(cameras=())
    return {p.name: float(np.mean([rollout(env, p, SceneTask.draw(np.random.default_rng([s, 99])), s).success
                                   for s in seeds])) for p in panel()}


def test_the_panel_spreads_from_never_to_always_and_repeats():
    rates = _rates(range(2000, 2040))
    assert len(rates) >= 6
    assert rates["expert"] == 1.0 and rates["random"] == 0.0 and rates["wrong-block"] == 0.0
    assert rates["noisy-0.01"] > rates["noisy-0.02"] > rates["noisy-0.03"]
    assert 0.2 <= rates["late-gripper"] <= 0.8 and 0.2 <= rates["early-release"] <= 0.8
    assert max(rates.values()) - min(rates.values()) >= 0.6
    assert _rates(range(2000, 2010)) == _rates(range(2000, 2010))  # seeded: the same rollouts again
