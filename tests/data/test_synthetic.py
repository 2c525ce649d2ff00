import json

import numpy as np
import pytest
import pyarrow.parquet as pq

from worldtune.scene.episode import SyntheticEpisode, camera_name, demo_episodes


def _fundamental(c1, c2) -> np.ndarray:
    """F with x2^T F x1 = 0 from two calibrated cameras."""
    R = c2.R @ c1.R.T
    t = c2.t - R @ c1.t
    tx = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    return np.linalg.inv(c2.K).T @ tx @ R @ np.linalg.inv(c1.K)


def test_rendering_is_an_exact_pinhole_projection():
    """Table pixels of one camera, lifted to the z=0 plane and projected into the other camera,
    land on pixels of the same texture colour; and the true F explains those correspondences."""
    ep = SyntheticEpisode(0, 30, seed=0, height=120, width=200)
    c1, c2 = ep.camera("exterior_1", 0), ep.camera("exterior_2", 0)
    im1, im2 = ep.render_view("exterior_1", 0), ep.render_view("exterior_2", 0)
    v, u = np.mgrid[60:120:3, 0:200:3]
    pix = np.stack([u.ravel(), v.ravel(), np.ones(u.size)], 1).astype(float)
    d = pix @ np.linalg.inv(c1.K).T @ c1.R  # world ray directions
    o = c1.center
    s = -o[2] / d[:, 2]
    X = o + s[:, None] * d
    on_table = (np.abs(X[:, 0]) < 0.5) & (np.abs(X[:, 1]) < 0.4) & (s > 0)
    far = np.array([min(np.linalg.norm(X[i, :2] - b[:2]) for b in list(ep.blocks.values()) + [ep.bowl])
                    for i in range(len(X))]) > 0.12  # away from objects (no occlusion)
    keep = on_table & far
    assert keep.sum() > 100
    x2 = c2.project(X[keep])
    inside = (x2[:, 0] > 1) & (x2[:, 0] < 198) & (x2[:, 1] > 1) & (x2[:, 1] < 118)
    a = im1[v.ravel()[keep][inside], u.ravel()[keep][inside]].astype(float)
    r2 = np.rint(x2[inside]).astype(int)
    b = im2[r2[:, 1], r2[:, 0]].astype(float)
    shuffled = np.roll(b, 7, axis=0)
    assert np.abs(a - b).mean() < 0.5 * np.abs(a - shuffled).mean()
    F = _fundamental(c1, c2)
    h1 = pix[keep][inside]
    h2 = np.concatenate([x2[inside], np.ones((inside.sum(), 1))], 1)
    assert np.abs(np.einsum("ij,jk,ik->i", h2, F, h1)).max() < 1e-6


def test_wrist_camera_moves_and_exteriors_do_not():
    ep = SyntheticEpisode(1, 30, seed=0, height=48, width=80)
    a, b = ep.cameras(0), ep.cameras(20)
    assert np.allclose(a["exterior_1_left"].R, b["exterior_1_left"].R)
    assert not np.allclose(a["wrist_left"].t, b["wrist_left"].t)
    assert camera_name("observation.images.wrist_left") == camera_name("wrist") == "wrist_left"
    assert ep.render_view("wrist", 3).shape == (48, 80, 3)


def _off_the_line(ep: SyntheticEpisode) -> float:
    """How far (m, seen from above) the gripper's path strays, before the grasp, from the straight line from
    where it starts to the block."""
    start = ep.gripper(0)[0][:2]
    d = ep.blocks[ep.target][:2] - start
    d /= np.linalg.norm(d)
    path = [ep.gripper(i)[0][:2] - start for i in range(ep.length) if i / (ep.length - 1) < ep.grasp[0]]
    return max(abs(float(p[0] * d[1] - p[1] * d[0])) for p in path)


def test_varied_motion_draws_the_path_and_still_does_the_task():
    """"varied": where the arm goes on the way and when it grasps differ per episode (what only the actions
    tell a world model), while every episode still grasps its block and puts it in the bowl; "scripted" keeps
    one timing and the straight path."""
    scripted = demo_episodes(12, seed=3, length=30)
    varied = demo_episodes(12, seed=3, length=30, motion="varied")
    assert {e.grasp for e in scripted} == {(0.46, 0.9)}
    assert max(_off_the_line(e) for e in scripted) < 1e-6
    assert np.std([e.grasp[0] for e in varied]) > 0.03
    assert sum(_off_the_line(e) > 0.05 for e in varied) >= 6
    for e in varied:
        closes = next(i for i in range(e.length) if e.gripper(i)[2])
        assert np.linalg.norm(e.gripper(closes)[0][:2] - e.blocks[e.target][:2]) < 0.02
        last = e.block_position(e.target, e.length - 1)
        assert np.linalg.norm(last[:2] - e.bowl[:2]) < 1e-9
    again = demo_episodes(12, seed=3, length=30, motion="varied")
    assert all(np.array_equal(a.gripper(i)[0], b.gripper(i)[0]) for a, b in zip(varied, again) for i in range(30))


def test_episodes_of_one_layout_start_alike_and_move_apart():
    """`layout_of`: every episode takes episode 0's blocks, bowl, cameras and start, so their first frames are the same
    image, but each draws its own path (the forward-dynamics overfit check's clips); episode 0 is the one it would
    be alone."""
    alone = demo_episodes(1, seed=4, length=17, motion="varied")[0]
    eps = demo_episodes(4, seed=4, length=17, motion="varied", layout_of=0)
    assert np.array_equal(eps[0].gripper(9)[0], alone.gripper(9)[0])
    first = [e.render(0) for e in eps]
    assert all(np.array_equal(f[n], first[0][n]) for f in first for n in f)
    apart = [max(np.linalg.norm(e.gripper(i)[0] - eps[0].gripper(i)[0]) for i in range(17)) for e in eps[1:]]
    assert min(apart) > 0.05, apart
    assert all(e.target == eps[0].target and np.array_equal(e.bowl, eps[0].bowl) for e in eps)


def test_the_bold_arm_is_darker_and_wider_and_changes_nothing_else():
    """`arm = "bold"`: the same episode (layout, path, cameras) with a near-black, thicker arm, so that the seeds'
    small views resolve it: where either arm is drawn the bold one is darker, it covers more pixels, and every pixel
    of neither arm is the same image. An unknown look is named."""
    grey, bold = (demo_episodes(1, seed=3, height=90, width=160, length=12, motion="varied", arm=a)[0]
                  for a in ("grey", "bold"))
    assert np.array_equal(grey.gripper(7)[0], bold.gripper(7)[0]) and grey.task == bold.task
    import worldtune.scene.episode as scene

    moving_at = scene.SyntheticEpisode._moving_at
    scene.SyntheticEpisode._moving_at = lambda self, g, o, b: [p for p in moving_at(self, g, o, b) if p.texture != "arm"]
    try:
        bare = grey.render_view("exterior_1_left", 7).astype(int)
    finally:
        scene.SyntheticEpisode._moving_at = moving_at
    g, b = (e.render_view("exterior_1_left", 7).astype(int) for e in (grey, bold))
    g_arm, b_arm = (np.abs(x - bare).max(-1) > 0 for x in (g, b))
    assert b_arm.sum() > 1.3 * g_arm.sum() > 0
    assert b[b_arm].mean() < 0.5 * g[g_arm].mean()
    neither = ~(g_arm | b_arm)
    assert np.array_equal(g[neither], b[neither])
    with pytest.raises(ValueError, match="arm 'pink': use one of grey, bold"):
        SyntheticEpisode(0, 12, arm="pink")


def test_a_block_stacked_on_another_ends_on_its_top_and_a_bad_place_is_named():
    """`place_on`: the carried block's bottom ends on the other block's top (not in the bowl), the path goes there,
    the instruction says so; the bowl stays the default, and a place that is the carried block itself is refused."""
    for motion in ("scripted", "varied"):
        for e in demo_episodes(6, seed=2, length=30, targets=("green",), motion=motion, place_on="blue"):
            last = e.block_position("green", e.length - 1)
            blue = e.blocks["blue"]
            assert np.allclose(last[:2], blue[:2]) and np.isclose(last[2] - 0.02, blue[2] + 0.025)
            assert np.linalg.norm(last[:2] - e.bowl[:2]) > 0.1
            assert e.task == "picks up the green block and stacks it on the blue cube."
    plain = demo_episodes(3, seed=2, length=30, targets=("green",))
    assert all("in the bowl" in e.task for e in plain)
    with pytest.raises(ValueError, match="place_on 'green'.*'bowl' or another block"):
        SyntheticEpisode(0, 30, targets=("green",), place_on="green")


def test_v3_files_and_cameras_json(v3_root):
    info = json.loads((v3_root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 15 and info["total_episodes"] == 5
    eps = pq.read_table(v3_root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["dataset_to_index"] - e["dataset_from_index"] for e in eps] == [e["length"] for e in eps]
    assert pq.read_table(v3_root / "data/chunk-000/file-000.parquet").num_rows == eps[0]["length"] + eps[1]["length"]
    cams = json.loads((v3_root / "meta/cameras.json").read_text())["cameras"]
    wrist = cams["observation.images.wrist_left"]
    assert not wrist["static"] and len(wrist["episodes"]["2"]["R"]) == eps[2]["length"]
    assert cams["observation.images.exterior_1_left"]["static"]
    assert np.array(cams["observation.images.exterior_2_left"]["K"]).shape == (3, 3)
