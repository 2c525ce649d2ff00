"""The local launcher: a rank killed mid-run is restarted and resumes exactly from the last checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from worldtune.launch.local import REQUEUE_EXIT_CODE, child_pids, classify, newest_step, train_command
from worldtune.train.checkpoint import CheckpointManager, step_of

REPO = Path(__file__).resolve().parents[2]
STEPS = 12


def _config(path: Path, model: Path, data: Path, out: Path) -> Path:
    path.write_text(f"""[model]
path = "{model}"
[train]
dataset = "{data}"
out = "{out}"
steps = {STEPS}
warmup = 2
lr = 1e-3
log_every = 1
tensorboard = false
val_samples = 1
text_dropout = 0.3
[train.checkpoint]
every = 1
keep = 2
""")
    return path


def _launch(config: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "worldtune.cli", "launch", "local", str(config), *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of one training rank: a child of torchrun, itself a child of the launcher."""
    for torchrun in child_pids(launcher):
        for pid in child_pids(torchrun):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in env:
                return pid
    return None


def _final(run: Path) -> tuple[dict, dict]:
    ck = CheckpointManager.load(run / "checkpoints" / f"step-{STEPS:08d}")
    return ck["trainable"], ck["optimizer"]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, cached_dataset, tmp_path_factory) -> Path:
    """An uninterrupted two-process run: the loss of every step and the final state to compare against."""
    root = tmp_path_factory.mktemp("ref")
    ref = _launch(_config(root / "ref.toml", tiny_model_dir, cached_dataset, root / "ref"), "--gpus", "2",
                  "--max-restarts", "0")
    assert ref.wait(300) == 0, ref.stdout.read().decode()[-3000:]
    return root / "ref"


def _assert_same_as_reference(run: Path, ref: Path) -> None:
    """Every step's loss, the final adapter weights and AdamW moments equal the uninterrupted run's."""
    loss = {m["step"]: m["loss"] for m in _metrics(run) if "loss" in m}
    ref_loss = {m["step"]: m["loss"] for m in _metrics(ref) if "loss" in m}
    assert loss == ref_loss and len(ref_loss) == STEPS
    wa, oa = _final(ref)
    wb, ob = _final(run)
    assert wa.keys() == wb.keys() and len(wa) > 0
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    for pid, st in oa["state"].items():
        assert torch.equal(st["exp_avg"], ob["state"][pid]["exp_avg"])
        assert torch.equal(st["exp_avg_sq"], ob["state"][pid]["exp_avg_sq"])
    assert json.loads((run / "run.json").read_text())["status"] == "done"


def _wait_for_step(p: subprocess.Popen, run: Path, step: int) -> None:
    deadline = time.time() + 180
    while not any(m.get("step", 0) >= step for m in _metrics(run)):
        assert p.poll() is None and time.time() < deadline, p.stdout.read().decode()[-3000:]
        time.sleep(0.05)


@pytest.mark.slow  # ~40 s on 2 cores: a torchrun launch killed and restarted, against a 2-process reference run
def test_killed_rank_is_restarted_and_resumes_exactly(reference, tiny_model_dir, cached_dataset, tmp_path):
    crash_cfg = _config(tmp_path / "crash.toml", tiny_model_dir, cached_dataset, tmp_path / "crash")
    crash = _launch(crash_cfg, "--gpus", "2", "--max-restarts", "2")
    try:
        # kill rank 1 once step 2 is logged: checkpoint k >= 1 is complete and the run is mid-way
        _wait_for_step(crash, tmp_path / "crash", 2)
        victim = _rank_pid(crash.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed_at = max(m["step"] for m in _metrics(tmp_path / "crash") if "step" in m)
        assert killed_at < STEPS
        assert crash.wait(240) == 0, crash.stdout.read().decode()[-3000:]
    finally:
        if crash.poll() is None:
            os.killpg(crash.pid, signal.SIGKILL)

    rows = [json.loads(x) for x in (tmp_path / "crash" / "logs" / "launch.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rows] == ["crashed", "done"], rows
    resumed = rows[1]["start_step"]
    assert 1 <= resumed <= killed_at + 1 and rows[1]["end_step"] == STEPS
    assert (tmp_path / "crash" / "logs" / "attempt-1.log").is_file()
    assert "--train.resume auto" in (tmp_path / "crash" / "logs" / "attempt-2.log").read_text()

    # the second attempt started right after its checkpoint; every step's loss equals the uninterrupted run
    crash_rows = [m for m in _metrics(tmp_path / "crash") if "loss" in m]
    steps = [m["step"] for m in crash_rows]
    assert steps[-(STEPS - resumed):] == list(range(resumed + 1, STEPS + 1))
    # checkpoints are consistent: folder step == recorded step, newest is the final one
    complete = CheckpointManager(tmp_path / "crash").complete()
    assert step_of(complete[-1]) == STEPS
    for ck in complete:
        assert json.loads((ck / "state.json").read_text())["step"] == step_of(ck)
    _assert_same_as_reference(tmp_path / "crash", reference)


@pytest.mark.slow  # ~40 s on 2 cores: a torchrun launch preempted and relaunched, against a 2-process reference run
def test_usr1_drill_checkpoints_requeues_and_continues_exactly(reference, tiny_model_dir, cached_dataset, tmp_path):
    """The preemption drill on two processes: SIGUSR1 to the job -> checkpoint and exit 42 (requeue);
    relaunched, it starts at the step after that checkpoint and every loss equals the uninterrupted run."""
    run = tmp_path / "drill"
    cfg = _config(tmp_path / "drill.toml", tiny_model_dir, cached_dataset, run)
    first = _launch(cfg, "--gpus", "2", "--max-restarts", "2")
    try:
        _wait_for_step(first, run, 3)
        first.send_signal(signal.SIGUSR1)  # to the launcher, as SLURM's --signal would
        assert first.wait(120) == REQUEUE_EXIT_CODE, first.stdout.read().decode()[-3000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    state = json.loads((run / "run.json").read_text())
    stopped = state["step"]
    assert state["status"] == "preempted" and 3 <= stopped < STEPS
    assert step_of(CheckpointManager(run).complete()[-1]) == stopped  # saved at the step it stopped

    again = _launch(cfg, "--gpus", "2", "--max-restarts", "0")
    assert again.wait(300) == 0, again.stdout.read().decode()[-3000:]
    rows = [json.loads(x) for x in (run / "logs" / "launch.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rows] == ["preempted", "done"], rows
    assert rows[1]["start_step"] == stopped and rows[1]["end_step"] == STEPS
    _assert_same_as_reference(run, reference)


# A stand-in for `worldtune train`: behaves as told by a script of exit codes, one per attempt
# ("stop" = wait for USR1, then exit 42 like the trainer; "error" = a one-line input error).
FAKE_TRAINER = """import pathlib, signal, sys, time
plan, state = sys.argv[1].split(","), pathlib.Path(sys.argv[2])
n = int(state.read_text()) if state.exists() else 0
state.write_text(str(n + 1))
step = plan[min(n, len(plan) - 1)]
if step == "stop":
    got = []
    signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
    pathlib.Path(str(state) + ".ready").touch()
    while not got:
        time.sleep(0.02)
    print("checkpoint saved", flush=True)
    sys.exit(42)
if step == "error":
    print("error: config file x.toml does not exist: pass a TOML file", flush=True)
    sys.exit(1)
sys.exit(int(step))
"""


def _fake_launch(tmp_path, monkeypatch, plan: str, max_restarts: int, on_ready=None):
    import worldtune.launch.local as local

    tmp_path.mkdir(parents=True, exist_ok=True)
    trainer = tmp_path / "fake_trainer.py"
    trainer.write_text(FAKE_TRAINER)
    state = tmp_path / "attempts.txt"
    monkeypatch.setattr(local, "train_command",
                        lambda config, overrides, gpus, **kw: [sys.executable, str(trainer), plan, str(state)])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[train]\nout = "{tmp_path / "run"}"\n')
    if on_ready is not None:
        import threading

        def _watch():
            deadline = time.time() + 30
            while not Path(str(state) + ".ready").exists() and time.time() < deadline:
                time.sleep(0.02)
            on_ready()
        threading.Thread(target=_watch, daemon=True).start()
    attempts = local.launch(cfg, [], gpus=1, max_restarts=max_restarts)
    return attempts, local.exit_code(attempts)


def test_crashes_restart_until_done_or_restarts_run_out(tmp_path, monkeypatch):
    attempts, code = _fake_launch(tmp_path / "a", monkeypatch, "3,42,0", max_restarts=5)
    assert [a.outcome for a in attempts] == ["crashed", "preempted", "done"] and code == 0
    attempts, code = _fake_launch(tmp_path / "b", monkeypatch, "3", max_restarts=2)
    assert [a.outcome for a in attempts] == ["crashed"] * 3 and code == 3  # 1 try + 2 restarts
    assert [a.attempt for a in attempts] == [1, 2, 3]
    rows = (tmp_path / "b" / "run" / "logs" / "launch.jsonl").read_text().splitlines()
    assert len(rows) == 3 and all((tmp_path / "b" / "run" / "logs" / f"attempt-{k}.log").is_file() for k in (1, 2, 3))


def test_input_error_is_not_retried(tmp_path, monkeypatch):
    attempts, code = _fake_launch(tmp_path, monkeypatch, "error", max_restarts=3)
    assert [a.outcome for a in attempts] == ["failed"] and code == 1


def test_sigterm_to_launcher_is_forwarded_and_not_restarted(tmp_path, monkeypatch):
    # SIGTERM to the launcher reaches the trainer as USR1 (a trainer killed by TERM would not exit 42)
    attempts, code = _fake_launch(tmp_path, monkeypatch, "stop,0", max_restarts=3,
                                  on_ready=lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert [a.outcome for a in attempts] == ["preempted"] and attempts[0].signalled and code == REQUEUE_EXIT_CODE
    assert "checkpoint saved" in Path(attempts[0].log).read_text()


def test_commands_and_outcomes(tmp_path):
    one = train_command("c.toml", ["--train.steps", "3"], 1, python="py")
    assert one == ["py", "-m", "worldtune.cli", "train", "c.toml", "--train.steps", "3", "--train.resume", "auto"]
    two = train_command("c.toml", [], 2, python="py")
    assert two[:7] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts"]
    assert two[-6:] == ["-m", "worldtune.cli", "train", "c.toml", "--train.resume", "auto"]
    assert train_command("c.toml", [], 1, python="py", stage="cache") == ["py", "-m", "worldtune.cli", "cache", "c.toml"]

    assert classify(0, tmp_path, 0.0, "") == "done"
    assert classify(REQUEUE_EXIT_CODE, tmp_path, 0.0, "") == "preempted"
    assert classify(1, tmp_path, 0.0, "Traceback ...\nRuntimeError: boom") == "crashed"
    assert classify(1, tmp_path, 0.0, "loading\nerror: config file x does not exist: pass a TOML file") == "failed"
    (tmp_path / "run.json").write_text(json.dumps({"status": "preempted"}))
    assert classify(1, tmp_path, time.time() - 60, "") == "preempted"  # torchrun's 1 for a worker's 42
    assert classify(1, tmp_path, time.time() + 60, "") == "crashed"  # a run.json from an earlier attempt

    # the launcher reads checkpoint folders without torch; it must agree with the CheckpointManager
    manager = CheckpointManager(tmp_path, keep=5)
    assert newest_step(tmp_path) == 0
    for step in (3, 12):
        manager.save(step, {"x": torch.zeros(1)}, {}, {})
    (manager.dir / "step-00000020").mkdir()  # no COMPLETE marker: a save that died
    assert newest_step(tmp_path) == step_of(manager.newest()) == 12



@pytest.mark.slow  # ~20 s on 2 cores: two processes launched end to end
def test_launch_local_caches_with_two_processes(tiny_model_dir, tmp_path):
    """`launch local --stage cache --gpus 2` shares the clips out over two processes (torchrun) and leaves
    one complete, merged cache, equal to a one-process cache."""
    from tests.train.fake_dataset import write_fake_dataset
    from worldtune.config import load_config
    from worldtune.data.cache import INDEX, LatentCache
    from worldtune.data.cache import run as cache_run

    data = write_fake_dataset(tmp_path / "ds", n_train=3, n_val=1)
    common = ["--model.path", str(tiny_model_dir), "--cache.dataset", str(data), "--cache.dtype", "fp32"]
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    two = tmp_path / "two"
    p = subprocess.run([sys.executable, "-m", "worldtune.cli", "launch", "local", str(cfg), "--gpus", "2",
                        "--stage", "cache", *common, "--cache.out", str(two)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "MASTER_PORT": "0"})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert (two / INDEX).is_file() and len(list((two / "logs").glob("attempt-*.log"))) == 1
    cache_run(load_config(None, [*common, "--cache.out", str(tmp_path / "one")]))
    a, b = LatentCache(tmp_path / "one"), LatentCache(two)
    assert a.clip_ids == b.clip_ids and len(a.clip_ids) == 4
    assert all(torch.equal(a.latents(c), b.latents(c)) for c in a.clip_ids)
