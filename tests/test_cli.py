import os
import subprocess
import sys
from pathlib import Path

import pytest

from worldtune.cli import main
from worldtune.config import ConfigError, load_config, parse_overrides

REPO = Path(__file__).resolve().parents[1]


def test_overrides_parse_types_and_nesting():
    tree = parse_overrides(["--train.steps", "5", "--train.lora.rank=8", "--generate.seeds", "[1, 2]",
                            "--train.cache", "none", "--model.name", "tiny-predict2"])
    assert tree == {"train": {"steps": 5, "lora": {"rank": 8}, "cache": None},
                    "generate": {"seeds": [1, 2]}, "model": {"name": "tiny-predict2"}}


def test_config_file_and_override_precedence(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[train]\nsteps = 7\nlr = 0.001\n")
    cfg = load_config(f, ["--train.steps", "9"])
    assert cfg.train.steps == 9 and cfg.train.lr == 0.001


def test_unknown_key_and_bad_file_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="train.stepz"):
        load_config(None, ["--train.stepz", "3"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_cli_prints_resolved_config_and_one_line_errors(capsys):
    assert main(["train", "--print-config", "--train.steps", "11"]) == 0
    assert "steps = 11" in capsys.readouterr().out
    assert main(["train", "--train.lora.rank", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "rank must be > 0" in err and "\n" not in err
    assert main(["model", "info", "no-such-model"]) == 1
    assert "unknown model" in capsys.readouterr().err


def test_console_script_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "worldtune.cli", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0
    for stage in ("prepare", "cache", "train", "export", "generate", "evaluate", "report", "launch", "demo",
                  "model", "doctor"):
        assert stage in out.stdout


@pytest.mark.parametrize("argv, message", [
    (["trian"], "No such command 'trian'"),                         # unknown command (a typo)
    (["export", "ckpt", "out", "--fusee"], "No such option: --fusee"),  # unknown option
    (["export"], "Missing argument"),                                # missing argument
    (["model", "info", "tiny-predict2.5", "--batch", "two"], "Invalid value for '--batch'"),  # bad value
    (["train", "--train.stpes", "5"], "unknown key train.stpes; did you mean `train.steps`?"),  # config key typo
])
def test_usage_errors_print_one_message_without_traceback(argv, message, capsys):
    code = main(argv)  # an uncaught exception here is the traceback a user would see
    err = capsys.readouterr().err
    assert code != 0 and message in err and "Traceback" not in err


def test_config_key_errors_say_where_the_value_came_from(tmp_path):
    with pytest.raises(ConfigError, match=r"^command line: train.lora.rank: lora rank must be > 0"):
        load_config(None, ["--train.lora.rank", "0"])
    f = tmp_path / "c.toml"
    f.write_text("[train]\nwarmpu = 3\n")
    with pytest.raises(ConfigError, match=rf"^{f}: unknown key train.warmpu; did you mean `train.warmup`\?"):
        load_config(f)
    with pytest.raises(ConfigError, match="unknown key trian; did you mean `train`"):
        load_config(None, ["--trian.steps", "3"])


def test_version(capsys):
    from worldtune import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"worldtune {__version__}"


def test_help_lists_every_config_key_with_type_default_and_description(capsys):
    from worldtune.config import TrainConfig, describe_fields

    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "train.steps: int = 200  optimizer steps" in out
    assert "model.path: str | none = none" in out
    for key, *_ in describe_fields(TrainConfig, "train"):
        assert f"{key}:" in out, key
    assert main(["generate", "--help"]) == 0
    assert "generate.fps: float | none = none" in capsys.readouterr().out


def _stage_commands() -> list[str]:
    """Every command that resolves a config (has --print-config), found from the app itself."""
    import inspect

    from worldtune.cli import app

    return [c.name or c.callback.__name__ for c in app.registered_commands
            if "print_config" in inspect.signature(c.callback).parameters]


@pytest.mark.parametrize("stage", _stage_commands())
def test_print_config_round_trips_for_every_stage(stage, tmp_path, capsys):
    from worldtune.config import WorldtuneConfig

    overrides = ["--train.cache", "none", "--train.lora.alpha", "8", "--generate.fps", "7.5",
                 "--generate.adapters", '[{path = "runs/a/export"}]', "--prepare.cameras", '{video = "video"}',
                 "--prepare.layout", "single", "--model.revision", "v1"]
    assert main([stage, "--print-config", *overrides]) == 0
    text = capsys.readouterr().out
    assert text.lstrip().startswith("[")  # section headers, so the text is a config file
    (tmp_path / "printed.toml").write_text(text)
    printed = load_config(tmp_path / "printed.toml")
    wanted = load_config(None, overrides)
    shown = [line[1:-1] for line in text.splitlines() if line.startswith("[") and "." not in line]
    assert shown, text
    for section in shown:
        assert getattr(printed, section) == getattr(wanted, section), section
    assert set(shown) < set(WorldtuneConfig.model_fields) or stage == "compare"
    assert main([stage, str(tmp_path / "printed.toml"), "--print-config"]) == 0
    assert capsys.readouterr().out == text  # printing the printed config changes nothing
    if "train" in shown:
        assert "# num_frames = (unset; int | none)" in text  # None keys are shown, commented


def test_import_leaves_the_environment_alone():
    code = ("import os; before = dict(os.environ); import worldtune, worldtune.config, worldtune.cli, "
            "worldtune.models.load, worldtune.train.trainer, worldtune.infer.generate; "
            "changed = {k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)}; "
            "assert not changed, changed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_", "DIFFUSERS_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]


def test_help_shows_defaults_readably_and_bracketed_section_names(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "train.lr: float = 4.316e-05" in out and "4.315837287515549e-05" not in out
    assert main(["compare", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the epilog
    assert "those of [model], [prepare], [train], [generate], [evaluate], [report]:" in out


def test_every_report_key_has_a_description():
    from worldtune.config import ReportConfig, describe_fields

    assert all(text for *_, text in describe_fields(ReportConfig, "report"))


def test_warmup_default_agrees_with_steps():
    """Unset, warmup is NVIDIA's 1000 steps but never more than a tenth of the run (200 steps: 20)."""
    from worldtune.train.schedule import lr_multiplier, warmup_steps

    cfg = load_config(None)
    assert cfg.train.warmup is None and warmup_steps(cfg.train.warmup, cfg.train.steps) == 20
    assert warmup_steps(None, 100_000) == 1000 and warmup_steps(7, 200) == 7
    w = warmup_steps(None, 200)
    assert lr_multiplier(w - 1, 200, w, 0.5, 0.2) == pytest.approx(0.5)  # the peak is reached early in the run


def test_a_table_given_on_the_command_line_replaces_the_files(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[prepare.cameras]\nexterior_1 = "a"\nexterior_2 = "b"\nwrist = "c"\n[prepare.grid]\nrows = 2\n')
    cfg = load_config(f, ["--prepare.cameras", '{video="video"}', "--prepare.grid.cols", "2"])
    assert cfg.prepare.cameras == {"video": "video"}  # replaced, not merged into the 3 cameras
    assert (cfg.prepare.grid.rows, cfg.prepare.grid.cols) == (2, 2)  # a dotted key still merges


def test_export_of_a_missing_or_empty_run_says_what_to_pass(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nope"), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "does not exist: pass a training run folder (train.out)" in err and "resume" not in err
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "out")]) == 1
    assert "holds no complete checkpoint yet" in capsys.readouterr().err


def test_summary_values_read_well():
    from worldtune.console import summary_value

    assert summary_value("seconds", 587.7) == "587.7 (9m48s)"
    assert summary_value("last_loss", 0.123456) == "0.1235" and summary_value("lr", 2 ** -14.5) == "4.316e-05"
    assert summary_value("steps", 200) == "200"
