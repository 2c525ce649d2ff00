"""`generate.cache` and `serve.cache` (models/step_cache.py) through the stages: generation writes the uncached
frames at a setting that caches nothing, records the cache in each row and its hash (a cached run regenerates, with
other frames); a sampler that gives the cache no steps is a one-line error; serve's chunk sampler keeps one cache
state per guidance branch and packed shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.infer.conftest import F, H, W, random_frames, write_image
from worldtune.config import WorldtuneConfig, load_config
from worldtune.data.video import read_frames
from worldtune.errors import ConfigError, GenerationError
from worldtune.infer.generate import run

SEQ = 160
STEPS = 6


def _cfg(model_dir: Path, inputs: Path, out: Path, **gen) -> WorldtuneConfig:
    base = dict(inputs=str(inputs), out=str(out), seeds=[5], steps=STEPS, guidance=7.0, height=H, width=W,
                num_frames=F, max_sequence_length=SEQ, baselines=[])
    return WorldtuneConfig.model_validate({"model": {"path": str(model_dir)}, "generate": {**base, **gen}})


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    write_image(d / "cube.png", random_frames(1, seed=3)[0])
    (d / "cube.txt").write_text("A robot arm picks up the red cube.")
    return d


@pytest.fixture(scope="module")
def uncached(tiny_model_dir, inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "plain"
    run(_cfg(tiny_model_dir, inputs, out))
    return out


def test_a_cache_that_caches_nothing_writes_the_uncached_frames(uncached, tiny_model_dir, inputs, tmp_path, one_thread):
    out = tmp_path / "nothing"
    run(_cfg(tiny_model_dir, inputs, out, cache={"kind": "first_block", "threshold": 0.0}))
    (row,), (plain,) = _rows(out), _rows(uncached)
    assert row["cache"] == "first_block(threshold=0)" and plain["cache"] is None
    assert row["params_hash"] != plain["params_hash"]  # a cached run never resumes an uncached one's rows
    np.testing.assert_array_equal(read_frames(out / row["video"]), read_frames(uncached / plain["video"]))


@pytest.mark.parametrize("cache", [{"kind": "first_block", "threshold": 0.5},
                                   {"kind": "taylorseer", "interval": 3, "warmup": 2}])
def test_a_caching_setting_regenerates_with_other_frames(uncached, tiny_model_dir, inputs, tmp_path, one_thread,
                                                         cache):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(uncached, out)
    run(_cfg(tiny_model_dir, inputs, out, cache=cache))
    (row,) = _rows(out)
    assert row["cache"].startswith(cache["kind"])
    diff = np.abs(read_frames(out / row["video"]).astype(int) - read_frames(uncached / row["video"]))
    assert diff.mean() > 0


def test_the_pipeline_sampler_of_predict_is_a_one_line_error(tiny_model_dir, inputs, tmp_path):
    with pytest.raises(GenerationError, match="runs no step cache; set generate.sampler"):
        run(_cfg(tiny_model_dir, inputs, tmp_path / "o", sampler="pipeline", cache={"kind": "first_block"}))


def _computed_run(cfg: WorldtuneConfig) -> int:
    """`run(cfg)`; the calls in which the transformer's last block computed (a hook put on as generation sets up)."""
    import worldtune.infer.generate as gen
    from worldtune.models.speed import repeated_blocks

    computed = [0]
    original = gen._step_cache

    def counted(transformer, g, s):
        last = list(repeated_blocks(transformer)[-1].children())[-1]
        last.register_forward_pre_hook(lambda *_: computed.__setitem__(0, computed[0] + 1))
        return original(transformer, g, s)

    gen._step_cache = counted
    try:
        run(cfg)
    finally:
        gen._step_cache = original
    return computed[0]


def test_cosmos3_generate_caches_through_the_pipeline_call(tiny_cosmos3_dir, inputs, tmp_path, one_thread):
    """Cosmos 3 generates through its pipeline call, which gives the cache its steps and branches: a setting that
    caches nothing writes the uncached frames on every call, a caching one skips calls and moves the frames."""
    def cfg(name: str, **gen) -> WorldtuneConfig:
        return _cfg(tiny_cosmos3_dir, inputs, tmp_path / name, mode="image2world", **gen)

    full = _computed_run(cfg("plain"))
    assert full == 2 * STEPS  # cond and uncond every step
    videos = {}
    for name, cache in (("plain", None), ("nothing", {"kind": "first_block", "threshold": 0.0}),
                        ("caching", {"kind": "taylorseer", "interval": 3, "warmup": 2})):
        if cache:
            computed = _computed_run(cfg(name, cache=cache))
            assert computed == full if name == "nothing" else 0 < computed < full
        (row,) = _rows(tmp_path / name)
        videos[name] = read_frames(tmp_path / name / row["video"]).astype(int)
    np.testing.assert_array_equal(videos["nothing"], videos["plain"])
    assert np.abs(videos["caching"] - videos["plain"]).mean() > 0


# ---------------------------------------------------------------------------------------------- serve
K, TIER = 8, 256


@pytest.fixture(scope="module")
def c3(tiny_cosmos3_dir):
    from worldtune.models.load import load_pipeline

    def load():
        pipe, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")
        pipe.set_progress_bar_config(disable=True)
        return pipe

    return load


def _chunk(pipe, cache: dict | None, requests, sampler: str = "worldtune", extra: tuple[str, ...] = ()
           ) -> tuple[list[np.ndarray], int]:
    """The chunks serve's sampler makes with `serve.cache` (None: off), and the steps its last block ran."""
    from worldtune.serve.world import chunk_sampler

    args = ["--serve.device", "cpu", "--serve.sampler", sampler, *extra] + [
        a for k, v in (cache or {}).items() for a in (f"--serve.cache.{k}", str(v))]
    sampler = chunk_sampler(pipe, load_config(None, args).serve)
    computed = [0]
    handle = pipe.transformer.layers[-1].mlp.register_forward_pre_hook(lambda *_: computed.__setitem__(0, computed[0] + 1))
    try:
        return sampler.run(requests), computed[0]
    finally:
        handle.remove()


def _requests(n: int, steps: int):
    from worldtune.models.action_dynamics import ChunkRequest
    from worldtune.models.cosmos3_domains import ActionDomain

    droid = ActionDomain("droid_lerobot", 8, 10, new=False)
    return [ChunkRequest(random_frames(1, 64, 112, seed=s)[0],
                         np.random.default_rng(s).uniform(-1, 1, (K, 10)).astype(np.float32), droid,
                         "Put the red cube on the blue one.", s, steps, 3.0, TIER, "ego_view", 15.0) for s in range(n)]


@pytest.mark.parametrize("nothing,sampler", [({"kind": "taylorseer", "interval": 1}, "worldtune"),
                                             ({"kind": "first_block", "threshold": 0}, "worldtune"),
                                             ({"kind": "first_block", "threshold": 0}, "pipeline")])
def test_serve_cache_that_caches_nothing_gives_the_uncached_chunks(c3, one_thread, nothing, sampler):
    requests = _requests(2, 4)
    ref, full = _chunk(c3(), None, requests, sampler)
    got, computed = _chunk(c3(), nothing, requests, sampler)
    assert computed == full == 4 * 2 * (1 if sampler == "worldtune" else 2)  # steps x branches (x rollouts: pipeline)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("sampler", ["worldtune", "pipeline"])
def test_serve_cache_skips_steps_and_moves_the_frames(c3, one_thread, sampler):
    requests = _requests(1, 6)
    ref, full = _chunk(c3(), None, requests, sampler)
    got, computed = _chunk(c3(), {"kind": "taylorseer", "interval": 2, "warmup": 2}, requests, sampler)
    assert computed < full
    assert np.abs(got[0].astype(int) - ref[0]).mean() > 0


def test_serve_cache_with_cuda_graphs_is_a_one_line_error():
    with pytest.raises(ConfigError, match="set serve.cuda_graphs = false"):
        load_config(None, ["--serve.cache.kind", "first_block", "--serve.cuda_graphs", "true"])


@pytest.mark.parametrize("sampler", ["worldtune", "pipeline"])
def test_predict2_is_a_one_line_error_that_names_the_cache(tmp_path, inputs, sampler):
    """Predict2 always runs its pipeline, which gives a cache no steps: the error must not send the user to a sampler
    setting that does not apply to it."""
    from worldtune.models.load import init_model_dir

    model_dir = init_model_dir("tiny-predict2", tmp_path / "tiny-predict2")
    with pytest.raises(GenerationError, match="runs no step cache; set generate.cache.kind") as err:
        run(_cfg(model_dir, inputs, tmp_path / "o", sampler=sampler, cache={"kind": "first_block"}))
    assert "generate.sampler" not in str(err.value)


def test_serve_cache_keeps_its_hooks_under_serve_fp8(c3, one_thread):
    """serve.fp8 turns the blocks' linears float8 after the cache is put on the blocks: a setting that caches nothing
    gives serve.fp8's chunks, a caching one still skips steps."""
    requests = _requests(1, 6)
    fp8 = ("--serve.fp8", "true")
    try:
        ref, full = _chunk(c3(), None, requests, extra=fp8)
    except ConfigError as e:  # a float8 backend that needs a GPU says so in one line
        pytest.skip(f"serve.fp8 does not run here: {e}")
    got, computed = _chunk(c3(), {"kind": "first_block", "threshold": 0}, requests, extra=fp8)
    assert computed == full
    np.testing.assert_array_equal(got[0], ref[0])
    _, computed = _chunk(c3(), {"kind": "taylorseer", "interval": 2, "warmup": 2}, requests, extra=fp8)
    assert computed < full
