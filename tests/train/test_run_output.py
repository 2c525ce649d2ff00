"""What a training run shows and leaves: log lines off a terminal, resume line, validation rows,
loss.png, run.json, and the trackers (TensorBoard, W&B offline)."""

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.train.conftest import train_cfg
from worldtune.cli import main
from worldtune.train.trainer import REQUEUE_EXIT_CODE, Trainer

REPO = Path(__file__).resolve().parents[2]
STEP_LINE = re.compile(r"^step (\d+)/(\d+) loss \d+\.\d{4} lr \S+ \d+\.\d\d s/step \d+\.\d\d samples/s ETA \S+$")


def _args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--model.path", str(model), "--train.dataset", str(data), "--train.out", str(out),
            "--train.warmup", "2", "--train.lr", "1e-3", "--train.log_every", "1", "--train.val_samples", "1",
            "--train.lora.rank", "4", "--train.val_steps", "1", *extra]


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_log_file_gets_step_lines_while_training_and_resume_continues_once(tiny_model_dir, cached_dataset,
                                                                          tmp_path, capsys):
    out = tmp_path / "run"
    # 1. stdout is a pipe (as under SLURM): plain step lines arrive while the run is still going
    p = subprocess.Popen([sys.executable, "-m", "worldtune.cli",
                          *_args(tiny_model_dir, cached_dataset, out, "--train.steps", "100000",
                                 "--train.checkpoint.every", "0", "--train.tensorboard", "false")],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    killer = threading.Timer(180, p.kill)  # a run that prints nothing until the end would hang here
    killer.start()
    steps = []
    for line in p.stdout:
        if STEP_LINE.match(line.strip()):
            steps.append(line.strip())
            if len(steps) == 3:
                break
    killer.cancel()
    assert len(steps) == 3 and steps[0].startswith("step 1/100000 "), steps
    assert p.poll() is None  # the lines came before training ended
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == REQUEUE_EXIT_CODE
    done = json.loads((out / "run.json").read_text())["step"]
    assert not (out / "loss.png").exists()

    # 2. resume (in this process: stdout captured, not a terminal): one line says from where
    end = done + 2
    extra = ("--train.steps", str(end), "--train.val_every", "1", "--train.resume", "auto")
    assert main(_args(tiny_model_dir, cached_dataset, out, *extra)) == 0
    text = capsys.readouterr().out
    assert f"resumed from step {done} (" in text and "world size 1 -> 1" in text
    assert [int(m.group(1)) for m in map(STEP_LINE.match, text.splitlines()) if m] == [done + 1, end]
    rows = _rows(out)
    val_steps = [r["step"] for r in rows if "val_loss" in r]
    assert val_steps == [done + 1, end]  # the last step validates once
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, end + 1))
    assert (out / "loss.png").stat().st_size > 1000  # `worldtune train` draws the curve
    run = json.loads((out / "run.json").read_text())
    assert run["lora"]["rank"] == 4 and run["lora"]["alpha"] == 4.0  # alpha as trained, not null
    assert run["model_path"] == str(tiny_model_dir) and "model_revision" in run  # what was asked, not only resolved

    # 3. rerunning the finished run adds no rows
    assert main(_args(tiny_model_dir, cached_dataset, out, *extra)) == 0
    assert _rows(out) == rows
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(out / "tensorboard"))
    ea.Reload()
    assert "config/text_summary" in ea.Tags()["tensors"]  # TensorBoard holds the resolved config
    assert "val_loss" in ea.Tags()["scalars"]


def test_warmup_not_below_steps_says_so(tiny_model_dir, cached_dataset, tmp_path, capsys):
    Trainer(train_cfg(tiny_model_dir, cached_dataset, tmp_path / "r", "--train.steps", "3", "--train.warmup", "5"))
    lines = [x for x in capsys.readouterr().out.splitlines() if "warmup" in x]
    assert lines == ["note: train.warmup=5 >= train.steps=3: the learning rate never leaves warmup (it reaches "
                     "lr x f_max only at the last step); set train.warmup below train.steps"]


def test_wandb_offline_gets_config_scalars_and_videos(tiny_model_dir, cached_dataset, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    Trainer(train_cfg(tiny_model_dir, cached_dataset, out, "--train.steps", "2", "--train.wandb", "true",
                      "--train.val_steps", "1", "--train.lora.rank", "4", "--train.checkpoint.every", "0")).fit()
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and runs[0].name.endswith((out / "wandb_id").read_text())
    log = next(runs[0].glob("run-*.wandb")).read_bytes()  # the records W&B syncs later
    for key in (b"grad_checkpointing", b"samples_per_s", b"val_loss"):  # config, scalars, validation
        assert key in log, key
    assert list((runs[0] / "files" / "media" / "videos" / "val_video").glob("*.mp4"))
