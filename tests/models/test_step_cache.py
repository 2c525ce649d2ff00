"""diffusers' step caches on both families (models/step_cache.py), on the tiny models: at a setting that caches
nothing the result is the uncached one bit for bit; at a caching setting the last block computes on fewer steps and
the result moves; a call repeated with the same inputs is served from the cache and equals the full call (the
registry metadata reads and writes the right streams), and metadata pointing at the wrong stream fails that check;
diffusers 0.42.1 still needs the patch."""

from __future__ import annotations

import copy

import pytest
import torch

from worldtune.config.step_cache import StepCacheConfig
from worldtune.errors import ConfigError
from worldtune.models import predict_sampler as sampler
from worldtune.models.latents import initial_noise
from worldtune.models.step_cache import (NamedBlockMetadata, apply_step_cache, remove_step_cache, reset_step_cache,
                                         step_context)

STEPS = 8
H, W, F = 32, 48, 9
SEQ = 160
# kind -> (settings that cache nothing, settings that cache)
KINDS = {"first_block": ({"threshold": 0.0}, {"threshold": 0.5}),
         "taylorseer": ({"interval": 1}, {"interval": 3, "warmup": 2})}


class Computed:
    """Counts the steps on which a block's MLP really ran (a skipped block's hook never calls it)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.n = 0
        self.handle = module.register_forward_pre_hook(lambda *_: setattr(self, "n", self.n + 1))


def cache(kind: str, **kw) -> StepCacheConfig:
    return StepCacheConfig(kind=kind, **kw)


# ----------------------------------------------------------------------------------------- Predict2.5
@pytest.fixture(scope="module")
def predict(tiny_model_dir):
    """A private copy of the tiny Predict2.5 pipeline (the caches hook its transformer) and its text embeddings."""
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(tiny_model_dir), dtype="fp32")
    pipe.set_progress_bar_config(disable=True)
    embed = {t: pipe.encode_prompt(t, do_classifier_free_guidance=False, max_sequence_length=SEQ)[0]
             for t in ("a robot arm picks a cube", "blurry")}
    return pipe, embed


def _predict_latents(pipe, embed, batch_guidance: bool = True) -> torch.Tensor:
    noise = initial_noise(3, (1, 16, (F - 1) // 4 + 1, H // 8, W // 8))
    cond = sampler.prepare(pipe, None, noise, F, H, W, as_image=True)
    return sampler.denoise(pipe, cond, embed["a robot arm picks a cube"], embed["blurry"], STEPS, 7.0,
                           batch_guidance=batch_guidance)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
def test_predict_cache_off_setting_equals_uncached_and_caching_skips_steps(predict, one_thread, kind, fused):
    """Through worldtune's Predict2.5 sampler, with and without the speed switches' block subclass (fused adaLN)."""
    from worldtune.models.speed import apply_speed

    base, embed = predict
    pipe = copy.copy(base)
    pipe.transformer = copy.deepcopy(base.transformer)
    if fused:
        apply_speed(pipe.transformer, fused_adaln=True)
    last = Computed(pipe.transformer.transformer_blocks[-1].ff)
    ref = _predict_latents(pipe, embed)
    assert last.n == STEPS
    nothing, caching = KINDS[kind]
    apply_step_cache(pipe.transformer, cache(kind, **nothing), "generate.cache")
    last.n = 0
    assert torch.equal(_predict_latents(pipe, embed), ref)
    assert last.n == STEPS
    remove_step_cache(pipe.transformer)
    apply_step_cache(pipe.transformer, cache(kind, **caching), "generate.cache")
    last.n = 0
    got = _predict_latents(pipe, embed)
    assert 0 < last.n < STEPS
    assert (got - ref).abs().max() > 1e-4
    last.n = 0
    assert torch.equal(_predict_latents(pipe, embed), got)  # the next video starts with an empty cache
    remove_step_cache(pipe.transformer)


def test_predict_unbatched_guidance_keeps_one_cache_per_branch(predict, one_thread):
    """Two calls per step (cond, uncond) with a cache that caches nothing: the same latents as without a cache, and
    with a caching threshold each branch decides on its own residuals (both still compute the first steps)."""
    base, embed = predict
    pipe = copy.copy(base)
    pipe.transformer = copy.deepcopy(base.transformer)
    ref = _predict_latents(pipe, embed, batch_guidance=False)
    apply_step_cache(pipe.transformer, cache("first_block", threshold=0.0), "generate.cache")
    assert torch.equal(_predict_latents(pipe, embed, batch_guidance=False), ref)


# ------------------------------------------------------------------------------------------- Cosmos 3
@pytest.fixture(scope="module")
def cosmos3(tiny_cosmos3_dir):
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _cosmos3_latents(pipe) -> torch.Tensor:
    """The plain pipeline call, as `worldtune generate` makes it for Cosmos 3 (the pipeline sets the contexts)."""
    return pipe("a robot arm picks a cube", num_frames=F, height=H, width=W, num_inference_steps=STEPS,
                guidance_scale=7.0, generator=torch.Generator().manual_seed(0), output_type="latent").video


@pytest.mark.parametrize("kind", list(KINDS))
def test_cosmos3_cache_off_setting_equals_uncached_and_caching_skips_steps(cosmos3, one_thread, kind):
    last = Computed(cosmos3.transformer.layers[-1].mlp)
    try:
        ref = _cosmos3_latents(cosmos3)
        assert last.n == 2 * STEPS  # cond and uncond
        nothing, caching = KINDS[kind]
        apply_step_cache(cosmos3.transformer, cache(kind, **nothing), "generate.cache")
        last.n = 0
        assert torch.equal(_cosmos3_latents(cosmos3), ref)
        assert last.n == 2 * STEPS
        remove_step_cache(cosmos3.transformer)
        apply_step_cache(cosmos3.transformer, cache(kind, **caching), "generate.cache")
        last.n = 0
        got = _cosmos3_latents(cosmos3)
        assert 0 < last.n < 2 * STEPS
        assert (got - ref).abs().max() > 1e-4
    finally:
        remove_step_cache(cosmos3.transformer)
        last.handle.remove()


def _one_call_kwargs(pipe) -> dict:
    """The transformer's keyword arguments of the pipeline's first call."""
    seen: list[dict] = []
    handle = pipe.transformer.register_forward_pre_hook(lambda m, a, kw: seen.append(kw) if not seen else None,
                                                        with_kwargs=True)
    try:
        pipe("a robot arm", num_frames=F, height=H, width=W, num_inference_steps=1, guidance_scale=1.0,
             generator=torch.Generator().manual_seed(0), output_type="latent")
    finally:
        handle.remove()
    return seen[0]


def _repeat_gap(transformer, kwargs: dict) -> tuple[float, int]:
    """(largest difference between a full call and the same call served from the first-block cache, blocks that
    computed the repeat). An exact cache reads the block's input and output streams right."""
    last = Computed(transformer.layers[-1].mlp)
    reset_step_cache(transformer)
    with torch.no_grad():
        try:
            with step_context(transformer, "cond", 0, 2):
                full = transformer(**kwargs)[0][0]
            last.n = 0
            with step_context(transformer, "cond", 1, 2):
                cached = transformer(**kwargs)[0][0]
        finally:
            last.handle.remove()
            reset_step_cache(transformer)
    return float((full - cached).abs().max()), last.n


def test_cosmos3_a_repeated_call_is_served_from_the_cache_exactly(cosmos3, one_thread):
    kwargs = _one_call_kwargs(cosmos3)
    apply_step_cache(cosmos3.transformer, cache("first_block", threshold=0.01), "generate.cache")
    try:
        gap, computed = _repeat_gap(cosmos3.transformer, kwargs)
    finally:
        remove_step_cache(cosmos3.transformer)
    assert computed == 0  # the repeat skipped the blocks after the first
    assert gap < 1e-5


def test_metadata_reading_the_wrong_stream_fails_the_repeat_check(cosmos3, one_thread, monkeypatch):
    """The check above is not vacuous: metadata that takes the text stream (und_seq) for the video stream's input
    gives the cached call a wrong video stream (or none that fits)."""
    from diffusers.hooks._helpers import TransformerBlockRegistry

    import worldtune.models.step_cache as step_cache

    monkeypatch.setitem(step_cache.BLOCKS, "Cosmos3VLTextMoTDecoderLayer", (1, 0, "und_seq", "gen_seq"))
    kwargs = _one_call_kwargs(cosmos3)
    cls = type(cosmos3.transformer.layers[0])
    apply_step_cache(cosmos3.transformer, cache("first_block", threshold=0.01), "generate.cache")
    try:
        with pytest.raises(RuntimeError, match="size of tensor"):
            _repeat_gap(cosmos3.transformer, kwargs)
    finally:
        remove_step_cache(cosmos3.transformer)
        monkeypatch.undo()
        step_cache.register_blocks(cosmos3.transformer)  # the right metadata back for the other tests
    assert isinstance(TransformerBlockRegistry.get(cls), NamedBlockMetadata)


def test_diffusers_still_needs_the_patch(tiny_cosmos3_dir, one_thread):
    """With diffusers' own registry entry, its first-block cache cannot read Cosmos 3's decoder layer (the bug
    models/step_cache.py works around); when this fails, diffusers has fixed it and the patch can go."""
    from diffusers import Cosmos3OmniTransformer, FirstBlockCacheConfig
    from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry

    model = Cosmos3OmniTransformer.from_pretrained(tiny_cosmos3_dir, subfolder="transformer")
    cls = type(model.layers[0])
    saved = TransformerBlockRegistry.get(cls)
    TransformerBlockRegistry.register(cls, TransformerBlockMetadata(
        return_hidden_states_index=1, return_encoder_hidden_states_index=0, hidden_states_argument_name="gen_seq",
        encoder_hidden_states_argument_name="und_seq"))  # diffusers 0.42.1's own entry
    try:
        model.enable_cache(FirstBlockCacheConfig(threshold=0.1))
        seq = torch.zeros(1, 4, model.config.hidden_size)
        with model.cache_context("cond"), pytest.raises(ValueError, match="'hidden_states' not found"):
            model.layers[0](seq, seq, None)
    finally:
        TransformerBlockRegistry.register(cls, saved)
        saved._cls = next(c for c in cls.__mro__ if c.__name__ == "Cosmos3VLTextMoTDecoderLayer")


def test_settings_are_checked():
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        StepCacheConfig(kind="first_block", threshold=-1)
    with pytest.raises(ValueError, match="interval must be >= 1"):
        StepCacheConfig(kind="taylorseer", interval=0)
    assert StepCacheConfig().label is None
    from worldtune.config import load_config

    assert load_config(None, ["--generate.cache.kind", "none"]).generate.cache.kind == "none"
    assert StepCacheConfig(kind="first_block", threshold=0.1).label == "first_block(threshold=0.1)"


def test_a_transformer_without_repeated_blocks_is_a_one_line_error():
    with pytest.raises(ConfigError, match="no list of repeated blocks"):
        apply_step_cache(torch.nn.Linear(2, 2), StepCacheConfig(kind="first_block"), "generate.cache")


def test_the_quality_benchmark_reads_its_options_as_the_config_does():
    """benchmarks/step_cache_quality.py: each option string becomes the `--generate.cache.*` overrides a user types."""
    from tests.benchmark_module import load_benchmark
    from worldtune.config import load_config

    bench = load_benchmark("step_cache_quality")
    for option in bench.DEFAULT_OPTIONS:
        cfg = load_config(None, bench.option_overrides(option)).generate.cache
        assert cfg.label is not None and cfg.kind == option.split(":")[0]
    cfg = load_config(None, bench.option_overrides("taylorseer:interval=3,warmup=2")).generate.cache
    assert (cfg.interval, cfg.warmup) == (3, 2)
    assert load_config(None, bench.option_overrides("none")).generate.cache.label is None
    assert bench.slug("first_block:threshold=0.1") == "first_block_threshold_0.1"


def test_a_cache_on_compiled_blocks_gives_the_eager_blocks_latents(predict, one_thread):
    """`worldtune generate` on CUDA compiles the blocks, then puts the cache on them: the cache's hooks run inside
    the compiled call (dynamo breaks the graph at the cache's decision, which diffusers keeps out of compile), and
    the latents are those of the cache on eager blocks. The eager backend stands in for inductor on the CPU."""
    base, embed = predict
    latents = []
    for compiled in (False, True):
        pipe = copy.copy(base)
        pipe.transformer = copy.deepcopy(base.transformer)
        if compiled:
            for block in pipe.transformer.transformer_blocks:
                block.compile(backend="eager")
        apply_step_cache(pipe.transformer, cache("first_block", threshold=0.5), "generate.cache")
        last = Computed(pipe.transformer.transformer_blocks[-1].ff)
        latents.append(_predict_latents(pipe, embed))
        assert 0 < last.n < STEPS
    assert torch.equal(latents[1], latents[0])


def test_the_quality_benchmark_pairs_own_and_other_actions_per_clip():
    """benchmarks/step_cache_quality.py: the action sensitivity is own - other actions of the same clip and seed."""
    from tests.benchmark_module import load_benchmark

    bench = load_benchmark("step_cache_quality")
    s = {"fd": {"dynamic_psnr": {("a", 0): 20.0, ("b", 0): 21.0}},
         "fd+other_actions": {"dynamic_psnr": {("b", 0): 20.5, ("a", 0): 19.0, ("c", 0): 1.0}}}
    assert bench.sensitivity(s, "fd") == {("a", 0): 1.0, ("b", 0): 0.5}


def test_diffusers_taylorseer_defaults_still_skip_nothing_on_cosmos3(cosmos3, one_thread):
    """diffusers 0.42.1's TaylorSeer defaults look for modules named like other DiTs' attention blocks, which Cosmos 3
    has none of: every call computes and the latents are the uncached ones (why models/step_cache.py builds the
    patterns from the transformer's own block list). When this fails, diffusers matches Cosmos 3 by itself."""
    from diffusers import TaylorSeerCacheConfig

    last = Computed(cosmos3.transformer.layers[-1].mlp)
    try:
        ref = _cosmos3_latents(cosmos3)
        cosmos3.transformer.enable_cache(TaylorSeerCacheConfig())
        last.n = 0
        got = _cosmos3_latents(cosmos3)
    finally:
        cosmos3.transformer.disable_cache()
        last.handle.remove()
    assert last.n == 2 * STEPS
    assert torch.equal(got, ref)
