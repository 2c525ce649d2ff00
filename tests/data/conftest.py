"""Small synthetic LeRobot datasets, written once per session and copied per test that edits them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from worldtune.scene.writer import write_demo_dataset

H, W = 48, 80  # small frames keep the data tests fast


@pytest.fixture(scope="session")
def v21_root(tmp_path_factory) -> Path:
    return write_demo_dataset(tmp_path_factory.mktemp("v21") / "ds", episodes=5, version="v2.1", height=H, width=W,
                              failed=(1,), workers=1)


@pytest.fixture(scope="session")
def v3_root(tmp_path_factory) -> Path:
    return write_demo_dataset(tmp_path_factory.mktemp("v3") / "ds", episodes=5, version="v3.0", height=H, width=W,
                              episodes_per_file=2, workers=1)


@pytest.fixture
def v21_copy(v21_root, tmp_path) -> Path:
    return Path(shutil.copytree(v21_root, tmp_path / "v21"))


@pytest.fixture
def v3_copy(v3_root, tmp_path) -> Path:
    return Path(shutil.copytree(v3_root, tmp_path / "v3"))
