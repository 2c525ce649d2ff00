"""The end-to-end path a new user runs first: every stage on the tiny model."""

import json
import re
import subprocess
import sys
from pathlib import Path

import av
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~1 min on 2 cores: every stage end to end, with the separate-views comparison
def test_demo_runs_every_stage_and_writes_decodable_videos(tmp_path):
    out = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "worldtune.cli", "demo", "--out", str(out), "--steps", "40",
                        "--model", "tiny-predict2.5",
                        "--compare-views"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "skipped" not in p.stdout.split("worldtune demo")[-1]  # every stage ran
    for stage in ("prepare", "cache latents", "generate", "Sampson error", "pixel metrics", "idm train",
                  "trajectories"):  # stdout is a pipe: each long loop speaks in plain lines while it runs
        progress = [x for x in p.stdout.splitlines() if re.match(rf"{stage}: \d+/\d+ \w+ \(\d+%\)", x)]
        assert len(progress) >= 3, (stage, progress)
    everything = [json.loads(x) for x in (out / "generations" / "generations.jsonl").read_text().splitlines()]
    rows = [r for r in everything if not r["baseline"]]  # the baselines: the first frame held, the real clip via the VAE
    assert {r["model"] for r in rows} == {"base", "lora"}
    assert {r["model"] for r in everything} - {"base", "lora"} == {"first_frame", "vae_round_trip"}
    assert len({r["seed"] for r in rows}) == 2
    video = out / "generations" / rows[0]["video"]
    with av.open(str(video)) as c:
        frames = sum(1 for _ in c.decode(video=0))
    assert frames == rows[0]["num_frames"]
    assert all(len(r["views"]) == 3 for r in rows)  # grids split back into the three cameras
    run = json.loads((out / "runs" / "lora" / "run.json").read_text())
    assert run["status"] == "done" and run["step"] == 40
    assert (out / "runs" / "lora" / "loss.png").is_file()
    assert (out / "report" / "report.html").is_file()
    assert json.loads((out / "eval" / "results.json").read_text())["format"] == "worldtune.eval"
    # the IDM learned the demo's actions and labelled every generated video into a LeRobot v3.0 dataset
    idm = json.loads((out / "runs" / "idm" / "idm_report.json").read_text())
    assert idm["metrics"]["idm"]["normalised_mse"] < idm["metrics"]["mean_action"]["normalised_mse"]
    from worldtune.data.lerobot import LeRobotDataset

    traj = LeRobotDataset(out / "trajectories")
    assert traj.version == "v3.0" and len(traj) == len(rows) and len(traj.cameras) == 3

    # --compare-views: the grid and the three-view model on the same episodes, one evaluation and report
    cmp = json.loads((out / "compare" / "compare.json").read_text())["branches"]
    assert cmp["grid"]["tokens_per_latent_frame"] == 28 and cmp["separate"]["tokens_per_latent_frame"] == 24
    for branch in ("grid", "separate"):
        train = cmp[branch]["train"]
        assert train["steps"] == 40 and train["last_loss"] < train["first_loss"], (branch, train)
    views = [r for r in map(json.loads, (out / "compare" / "gen_separate" / "generations.jsonl").read_text().splitlines())
             if not r["baseline"]]
    assert {r["model"] for r in views} == {"base", "separate"} and all(r["sampler"] == "multiview" for r in views)
    assert all(set(r["views"]) == {"exterior_1", "exterior_2", "wrist"} for r in views)
    models = json.loads((out / "compare" / "eval" / "results.json").read_text())["models"]
    assert {"gen_grid/base", "gen_separate/base", "grid", "separate", "real:gen_grid", "real:gen_separate"} == {
        k for k, v in models.items() if not v["baseline"]}
    assert {f"{g}/{b}" for g in ("gen_grid", "gen_separate") for b in ("first_frame", "vae_round_trip")} == {
        k for k, v in models.items() if v["baseline"]}
    md = (out / "compare" / "report" / "report.md").read_text()
    assert "run_grid" in md and "run_separate" in md  # both loss curves


@pytest.mark.slow  # 15-60 s on 2 cores: every stage of the recipe, in order
def test_demo_recipe_command_list_runs_as_written(tmp_path, monkeypatch):
    """configs/demo.toml's own list of commands, run in order in a fresh folder (shorter training and
    sampling only: the same stages, the same folders)."""
    import shlex

    from worldtune.cli import main

    recipe = REPO / "configs" / "demo.toml"
    commands = [shlex.split(line.lstrip("# ").split("(")[0]) for line in recipe.read_text().splitlines()
                if line.startswith("#   worldtune ")]
    assert [c[1] for c in commands] == ["demo", "prepare", "cache", "train", "generate", "evaluate", "report"]
    faster = {"train": ["--train.steps", "4", "--train.val_every", "2", "--train.checkpoint.every", "2"],
              "generate": ["--generate.steps", "2", "--generate.seeds", "[0]"]}
    monkeypatch.chdir(tmp_path)
    for cmd in commands:
        args = [str(recipe) if a == "configs/demo.toml" else a for a in cmd[1:]]
        assert main(args + faster.get(cmd[1], [])) == 0, cmd
    rows = [json.loads(x) for x in (tmp_path / "demo_out/generations/generations.jsonl").read_text().splitlines()]
    # [generate] includes the run's adapter, named by the run; and the baselines
    assert {r["model"] for r in rows} == {"base", "lora", "first_frame", "vae_round_trip"}
    assert (tmp_path / "demo_out/runs/lora/loss.png").is_file()
    assert (tmp_path / "demo_out/report/report.html").is_file()


@pytest.mark.slow  # ~7 min on 2 cores: the default demo on the seed model, as `make demo` runs it (two seeds per input)
def test_seed_demo_shows_post_training_learning(tmp_path):
    """On the seed model, post-training on the task it never saw raises dynamic PSNR against the real
    continuation on held-out episodes, with a 95 % interval above 0 over at least 8 inputs; every pixel and
    temporal-geometry cell of base and adapter has a value, beside the first-frame and VAE baseline rows."""
    out = tmp_path / "demo"
    p = subprocess.run([sys.executable, "-m", "worldtune.cli", "demo", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    models = json.loads((out / "eval" / "results.json").read_text())["models"]
    assert {"base", "lora", "first_frame", "vae_round_trip"} <= set(models)
    for name in ("base", "lora"):
        for metric in ("psnr", "ssim", "dynamic_psnr", "sampson_temporal", "warp_error", "ee_track_error"):
            assert models[name][metric]["mean"] is not None, (name, metric)
    # the end-effector detector finds the real clips' gripper within a few px (2.3 measured at 64x112 views)
    assert models["real"]["ee_track_error"]["mean"] < 4.0, models["real"]["ee_track_error"]
    diff = models["lora"]["vs_base"]["dynamic_psnr"]
    assert diff["n_inputs"] >= 8 and diff["ci_low"] > 0, diff
    # the VAE draws the held-out task's views at 28 dB or better (29.7 measured; 27.4 before its decoder saw the
    # held-out task's pixels, which this rejects)
    assert models["vae_round_trip"]["psnr"]["mean"] >= 28.0, models["vae_round_trip"]["psnr"]
    # the adapter learned the held-out task: its training loss fell
    run = json.loads((out / "runs" / "lora" / "run.json").read_text())["summary"]
    assert run["last_loss"] < 0.7 * run["first_loss"], run
    # does each clip do the task: the detector reads the real clips (10/10 measured), every model has its rate
    results = json.loads((out / "eval" / "results.json").read_text())
    task = results["task_success"]["models"]
    assert task["real"]["done"] >= 0.8 * task["real"]["n"] and task["real"]["n"] >= 8, task["real"]
    assert all(task[m]["n"] == task["real"]["done"] for m in ("base", "lora")), task
    # across inputs vs across seeds: a second seed of every held-out input gives each model a ratio and interval
    spread = results["input_vs_seed"]["models"]
    for name in ("base", "lora"):
        assert spread[name]["inputs_with_seeds"] == task["real"]["n"] and spread[name]["ci_low"] is not None, spread[name]


@pytest.mark.slow
@pytest.mark.usefixtures("domain_tables")
def test_action_demo_post_trains_forward_dynamics_and_labels_its_videos_back(tmp_path):
    """`worldtune demo --actions` on tiny-cosmos3 (random: plumbing, not learning): a forward-dynamics adapter, both
    models under own and other actions, the closed-loop table with the IDM's ceiling on the real clips."""
    from worldtune.demo import run

    out = tmp_path / "fd"
    run(str(out), steps=10, model="tiny-cosmos3", actions=True)
    assert json.loads((out / "runs" / "lora" / "run.json").read_text())["task"] == "forward_dynamics"
    results = json.loads((out / "eval" / "results.json").read_text())
    assert {"base", "fd", "base+other_actions", "fd+other_actions"} <= set(results["models"])
    assert "action_sensitivity" in results["models"]["fd"]
    closed = results["closed_loop"]["idm"]["models"]
    assert closed["real clip"]["nmse"] < 0.5 < closed["fd"]["nmse"]  # random weights follow no action
    assert results["closed_loop"]["cosmos3"]["models"]["fd"]["nmse"] is not None
    assert "Closed-loop action consistency" in (out / "report" / "report.html").read_text()


@pytest.mark.slow  # ~2 min on 2 cores: a tiny Cosmos 3 model prepared, cached, trained and scored
def test_eval_docs_actions_mode_commands_run_as_written(tmp_path, monkeypatch):
    """docs/eval.md's actions-mode commands, in a fresh folder, in the order the page lists them."""
    import shlex

    from worldtune.cli import main

    text = (REPO / "docs" / "eval.md").read_text()
    block = next(b for b in text.split("```bash")[1:] if "--evaluate.mode actions" in b).split("```")[0]
    commands = [shlex.split(line.split("#")[0]) for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert [c[1] for c in commands] == ["demo", "model", "prepare", "cache", "train", "evaluate"]
    monkeypatch.chdir(tmp_path)
    for cmd in commands:
        assert main([str(REPO / a) if a.startswith("configs/") else a for a in cmd[1:]]) == 0, cmd
    results = json.loads((tmp_path / "demo_out/eval_actions/results.json").read_text())
    assert results["models"]["fd"]["action_sensitivity"]["dynamic_psnr"]["n_inputs"] >= 5


def test_seed_inputs_add_one_noise_seed_to_the_first_inputs(tmp_path):
    """A seed model's demo makes one seed per input; by default the next seed for every input (what the across inputs /
    across seeds figure needs, every input weighed alike), --seed-inputs N for the first N, and nothing where the
    recipe already makes several or N is 0."""
    from worldtune.demo import demo_config, seed_overrides

    seed_cfg = demo_config(tmp_path, 10, "seed-predict2.5")
    assert seed_cfg.generate.seeds == [0]
    every = demo_config(tmp_path, 10, "seed-predict2.5", overrides=seed_overrides(seed_cfg, None)).generate
    assert every.seeds == [1] and every.max_inputs == seed_cfg.generate.max_inputs
    more = seed_overrides(seed_cfg, 5)
    assert more == ["--generate.seeds", "[1]", "--generate.max_inputs", "5"]
    extra = demo_config(tmp_path, 10, "seed-predict2.5", overrides=more).generate
    assert extra.seeds == [1] and extra.max_inputs == 5 and extra.out == seed_cfg.generate.out
    assert seed_overrides(seed_cfg, 0) is None
    assert seed_overrides(demo_config(tmp_path, 10, "tiny-predict2.5"), 5) is None  # seeds [0, 1] already
    assert seed_overrides(demo_config(tmp_path, 10, "tiny-predict2.5"), None) is None


def test_the_demo_renders_the_arm_the_shipped_weights_were_made_on():
    """The registered recipes describe the next seeds (a bold arm); the shipped weights were made on the grey one, so
    the demo's data, and `--continue`, must keep rendering grey until new weights ship."""
    from worldtune.demo import demo_data
    from worldtune.models.seeds import read_manifest
    from worldtune.seed import recipe_for, shipped_recipe

    for name in ("seed-predict2.5", "seed-cosmos3"):
        made_on = read_manifest(name)["recipe"].get("arm", "grey")
        assert recipe_for(name).arm == "bold" and made_on == "grey"
        assert shipped_recipe(name).arm == made_on == demo_data(name)["arm"]
