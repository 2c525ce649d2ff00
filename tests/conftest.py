"""Fixtures shared across test folders: one tiny model directory and one cached dataset per session.

Building the tiny model (and caching latents with it) costs seconds; sharing them keeps CI short.
"""

import signal
from pathlib import Path

import pytest
import torch

from tests.train.fake_dataset import write_fake_dataset
from worldtune.config import load_config


@pytest.fixture(autouse=True)
def signal_handlers_restored():
    """Every test leaves SIGTERM, SIGUSR1 and SIGINT as it found them: a run stopped in-process leaves them ignored
    (as a scheduler's repeat must not kill its exit), and an ignored signal is inherited by every process a later
    test starts (a batch shell cannot even trap it)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        if signal.getsignal(s) is not handler:
            signal.signal(s, handler)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny-predict2.5 pipeline written as a diffusers directory, loaded the way a user's weights are."""
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-predict2.5", tmp_path_factory.mktemp("models") / "tiny-predict2.5")


@pytest.fixture(scope="session")
def tiny_cosmos3_dir(tmp_path_factory) -> Path:
    """A tiny-cosmos3 pipeline written as a diffusers directory (shared by the Cosmos 3 tests)."""
    from worldtune.models.load import init_model_dir

    return init_model_dir("tiny-cosmos3", tmp_path_factory.mktemp("models") / "tiny-cosmos3")


@pytest.fixture(scope="session")
def cached_dataset(tmp_path_factory, tiny_model_dir) -> Path:
    """A fake prepared dataset with latents and projected + raw text caches for the tiny model dir."""
    from worldtune.data.cache import run as cache_run

    root = write_fake_dataset(tmp_path_factory.mktemp("data") / "ds", n_train=4, n_val=1)
    for kind in ("projected", "raw"):
        cache_run(load_config(None, ["--model.path", str(tiny_model_dir), "--cache.dataset", str(root),
                                     "--cache.text", kind, "--cache.dtype", "fp32"]))
    return root


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matmuls run fastest on one thread; on a shared 2-core box more threads only contend."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def reference_conv3d():
    """PyTorch's reference 3-D convolution kernel on both sides of a bit-for-bit comparison with a plain diffusers
    pipeline: worldtune's loaded VAEs call oneDNN directly on the CPU (tests/models/test_cpu_conv3d.py checks that
    against the reference kernel within float32 rounding), plain diffusers picks the kernel by batch size."""
    enabled = torch.backends.mkldnn.enabled  # set directly: flags() also sets oneDNN's TF32 switch, with a warning
    torch.backends.mkldnn.enabled = False
    yield
    torch.backends.mkldnn.enabled = enabled


@pytest.fixture(scope="session")
def fd_trained(tmp_path_factory, tiny_cosmos3_dir) -> dict:
    """The demo robot (4-D actions) as 5-frame 32x64 grid clips with actions (3 held-out episodes), cached for
    forward dynamics, and a tiny-cosmos3 forward-dynamics adapter trained on it for a few steps (plumbing, not
    quality): {"lerobot", "dataset", "adapter", "model"}."""
    from worldtune.data.cache import run as cache_run
    from worldtune.data.prepare import run as prepare_run
    from worldtune.scene.writer import write_demo_dataset
    from worldtune.train.trainer import Trainer

    base = tmp_path_factory.mktemp("fd_eval")
    src = write_demo_dataset(base / "lerobot", episodes=6, height=48, width=80, workers=1)
    cfg = load_config(None, ["--prepare.source", str(src), "--prepare.out", str(base / "ds"), "--prepare.height", "32",
                             "--prepare.width", "64", "--prepare.num_frames", "5", "--prepare.workers", "1",
                             "--prepare.val_fraction", "0.5", "--prepare.prompt_template", "plain",
                             "--prepare.actions.key", "action"])
    prepare_run(cfg.prepare, quiet=True)
    fd = ("--model.path", str(tiny_cosmos3_dir), "--train.task", "forward_dynamics")
    cache_run(load_config(None, [*fd, "--cache.dataset", str(base / "ds"), "--cache.dtype", "fp32"]))
    summary = Trainer(load_config(None, [*fd, "--train.dataset", str(base / "ds"), "--train.out", str(base / "fd"),
                                         "--train.steps", "3", "--train.lr", "1e-2", "--train.warmup", "1",
                                         "--train.val_videos", "0", "--train.tensorboard", "false",
                                         "--train.checkpoint.every", "0", "--train.val_samples", "1"])).fit()
    return {"lerobot": src, "dataset": base / "ds", "adapter": Path(summary["export"]), "model": tiny_cosmos3_dir}


@pytest.fixture
def domain_tables(monkeypatch):
    """diffusers' Cosmos 3 domain tables as they are now, restored after the test (registering a new robot's domain
    edits them in place)."""
    from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as p

    for table in ("_EMBODIMENT_TO_DOMAIN_ID", "_EMBODIMENT_TO_RAW_ACTION_DIM"):
        monkeypatch.setattr(p, table, dict(getattr(p, table)))


@pytest.fixture
def float8_on_cpu(monkeypatch):
    """torchao's float8 path on the CPU, where torch's own float8 matmul runs it: worldtune's device check and
    torchao's inference hardware check (both refuse the CPU, which has no float8 tensor cores to be fast on) are
    lifted, so tests check the arithmetic the GPU runs. Skips, with the reason, where torchao is missing or its
    float8 matmul does not run on this CPU."""
    torchao_quant = pytest.importorskip("torchao.quantization.quant_api", reason="torchao (the fp8 extra) is missing")
    import torch

    from worldtune.models import float8

    monkeypatch.setattr(float8, "check_float8_device", lambda device, option: None)
    monkeypatch.setattr(torchao_quant, "_check_hardware_support", lambda granularity: None)
    try:
        probe = torch.nn.Linear(16, 16).to(torch.bfloat16)
        float8._quantize([probe], probe)
        probe(torch.ones(2, 16, dtype=torch.bfloat16))
    except Exception as e:  # noqa: BLE001 -- the reason is the skip's message
        pytest.skip(f"torchao's float8 matmul does not run on this CPU: {type(e).__name__}: {e}")
