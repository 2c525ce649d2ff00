"""`worldtune idm train` on actions it must not learn from, stopped by a scheduler, resumed after a kill."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer

from worldtune.config import load_config
from worldtune.errors import DatasetError

IDM = ("--idm.view_height", "16", "--idm.view_width", "24", "--idm.channels", "4", "--idm.batch_size", "4",
       "--idm.warmup", "1", "--idm.log_every", "1", "--idm.device", "cpu")


@pytest.fixture(scope="session")
def demo3(tmp_path_factory) -> Path:
    from worldtune.scene.writer import write_demo_dataset

    return write_demo_dataset(tmp_path_factory.mktemp("idm3") / "ds", episodes=3, height=32, width=48, workers=1,
                              length=12)


def _cfg(dataset: Path, out: Path, *extra: str):
    return load_config(None, ["--idm.dataset", str(dataset), "--idm.out", str(out), *IDM, *extra])


def _with_actions(demo3: Path, tmp_path: Path, change) -> Path:
    """A copy of the dataset whose data file's action column is `change(list of rows)`."""
    ds = Path(shutil.copytree(demo3, tmp_path / "ds"))
    f = next((ds / "data").rglob("*.parquet"))
    t = pq.read_table(f)
    rows = change(t.column("action").to_pylist(), t)
    i = t.column_names.index("action")
    pq.write_table(t.set_column(i, "action", pa.array(rows)), f)
    return ds


def _row(t, episode: int, frame: int) -> int:
    eps, frames = t.column("episode_index").to_pylist(), t.column("frame_index").to_pylist()
    return next(i for i, (e, fr) in enumerate(zip(eps, frames)) if e == episode and fr == frame)


def _set(episode: int, frame: int, value):
    def change(rows, t):
        rows[_row(t, episode, frame)] = value
        return rows
    return change


@pytest.mark.parametrize("value, words", [
    ([float("nan")] * 4, "is not finite"),
    ([0.0, float("inf"), 0.0, 0.0], "is not finite"),
    ([0.0, 1.0], "2 numbers, the others have 4"),
    (None, "is empty"),
])
def test_bad_action_rows_name_the_episode_and_frame(demo3, tmp_path, value, words):
    from worldtune.idm.train import IdmTrainer

    ds = _with_actions(demo3, tmp_path, _set(1, 5, value))
    with pytest.raises(DatasetError, match=words) as e:
        IdmTrainer(_cfg(ds, tmp_path / "run", "--idm.steps", "2"))
    assert "episode 1, frame 5" in str(e.value) and "\n" not in str(e.value)


def test_a_string_action_row_is_a_one_line_error(demo3, tmp_path):
    from worldtune.idm.data import read_actions
    from worldtune.data.lerobot import LeRobotDataset

    def strings(rows, t):
        return [json.dumps(r) for r in rows]  # every row a string, as a broken converter writes it

    ds = _with_actions(demo3, tmp_path, strings)
    with pytest.raises(DatasetError, match="episode 0, frame 0.*not a list of numbers"):
        read_actions(LeRobotDataset(ds), "action")


# ---------------------------------------------------------------------------------------- stop signals
def _killed_by_default(signum, frame):
    raise RuntimeError("killed by SIGTERM (the default action): no checkpoint")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_saves_a_checkpoint_and_exits_42(demo3, tmp_path, monkeypatch, sig):
    import os

    from worldtune.idm import train as idm_train
    from worldtune.train.checkpoint import CheckpointManager

    previous = signal.signal(sig, _killed_by_default)  # what the process would do without a handler of its own
    step = idm_train.IdmTrainer.train_step

    def step_then_signal(self):
        row = step(self)
        if self.step == 3:
            os.kill(os.getpid(), sig)
        return row

    monkeypatch.setattr(idm_train.IdmTrainer, "train_step", step_then_signal)
    try:
        with pytest.raises(typer.Exit) as e:
            idm_train.run(_cfg(demo3, tmp_path / "run", "--idm.steps", "8", "--idm.checkpoint.every", "100"))
    finally:
        signal.signal(sig, previous)
    assert e.value.exit_code == 42
    assert CheckpointManager(tmp_path / "run").newest().name.endswith("3")
    monkeypatch.undo()
    summary = idm_train.run(_cfg(demo3, tmp_path / "run", "--idm.steps", "8", "--idm.resume", "auto"))
    assert summary["steps"] == 8


# phase -> (module, what the signal lands in, signal): all after the last of 4 training steps
LATE = {
    "last save": ("worldtune.idm.train", "IdmTrainer.save", "SIGTERM"),
    "held-out labelling": ("worldtune.idm.train", "IdmTrainer.evaluate", "SIGTERM"),
    "report": ("worldtune.idm.train", "print_report", "SIGUSR1"),
}
LATE_RUN = ("--idm.steps", "4", "--idm.checkpoint.every", "100")


@pytest.fixture(scope="module")
def stopped_late(demo3, tmp_path_factory) -> dict[str, tuple[Path, int, str]]:
    """Each phase's run folder, exit code and output."""
    from tests.faults.conftest import signal_runs

    root = tmp_path_factory.mktemp("idm_late")
    runs, outs = [], {}
    for phase, (module, name, signame) in LATE.items():
        out = outs[phase] = root / phase.replace(" ", "_")
        args = ["idm", "train", "--idm.dataset", str(demo3), "--idm.out", str(out), *IDM, *LATE_RUN]
        runs.append((module, name, signame, str(root / f"{out.name}.log"), args))
    codes = signal_runs(runs, "import torch, worldtune.cli, worldtune.idm.train")
    return {phase: (outs[phase], codes[log], Path(log).read_text()) for phase, (*_, log, _) in zip(outs, runs)}


@pytest.mark.parametrize("phase", list(LATE))
def test_a_stop_signal_after_the_last_step_exits_42_and_says_so(stopped_late, demo3, phase):
    """A signal in the last save stops before labelling (the checkpoint holds the trained model; a rerun labels);
    one during labelling or the report lets them finish (nothing is left to save). Either way: exit 42, one line."""
    from worldtune.idm import train as idm_train

    out, code, output = stopped_late[phase]
    signame = LATE[phase][2]
    assert code == 42, f"{phase}: exit {code}\n{output[-3000:]}"
    (said,) = [line for line in output.splitlines() if line.startswith(f"stopped by {signame}")]
    labelled = (out / idm_train.REPORT).is_file() and (out / "idm" / "idm.json").is_file()
    assert labelled == (phase != "last save"), said
    assert ("the run had finished" in said) == labelled and "step 4" in said, said
    if not labelled:  # the rerun labels from the checkpoint, without training again
        summary = idm_train.run(_cfg(demo3, out, *LATE_RUN, "--idm.resume", "auto"))
        assert summary["steps"] == 4 and summary["first_loss"] is None  # no step trained
        assert json.loads((out / idm_train.REPORT).read_text())["step"] == 4


def test_a_stop_signal_while_the_episodes_load_exits_42_and_the_rerun_trains(demo3, tmp_path):
    """The other end of "exit 42 from start to end": a signal that lands while the episodes load (before any step)
    exits 42 in one line with nothing saved, and the same command with --idm.resume auto then trains from step 0."""
    from tests.faults.conftest import signal_runs
    from worldtune.idm import train as idm_train

    out, log = tmp_path / "run", str(tmp_path / "run.log")
    args = ["idm", "train", "--idm.dataset", str(demo3), "--idm.out", str(out), *IDM, *LATE_RUN]
    codes = signal_runs([("worldtune.idm.train", "load_episodes", "SIGUSR1", log, args)],
                        "import torch, worldtune.cli, worldtune.idm.train")
    output = Path(log).read_text()
    assert codes[log] == 42, output[-3000:]
    (said,) = [line for line in output.splitlines() if line.startswith("stopped by SIGUSR1")]
    assert "at step 0: nothing trained yet" in said, said
    assert not (out / "checkpoints").exists() and not (out / idm_train.REPORT).exists()
    summary = idm_train.run(_cfg(demo3, out, *LATE_RUN, "--idm.resume", "auto"))
    assert summary["steps"] == 4 and summary["first_loss"] is not None  # trained, from the start


def test_metrics_are_trimmed_to_the_checkpoint_on_resume(demo3, tmp_path, monkeypatch):
    from worldtune.idm import train as idm_train

    step = idm_train.IdmTrainer.train_step

    def killed_at_5(self):
        if self.step == 5:
            raise KeyboardInterrupt  # a kill -9 after step 5 was logged, past the checkpoint of step 4
        return step(self)

    monkeypatch.setattr(idm_train.IdmTrainer, "train_step", killed_at_5)
    args = ("--idm.steps", "7", "--idm.checkpoint.every", "2")
    with pytest.raises(KeyboardInterrupt):
        idm_train.run(_cfg(demo3, tmp_path / "run", *args))
    monkeypatch.undo()
    idm_train.run(_cfg(demo3, tmp_path / "run", *args, "--idm.resume", "auto"))
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(x)]
    assert steps == list(range(1, 8))
