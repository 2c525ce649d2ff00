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
