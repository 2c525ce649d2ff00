"""The world-model benchmark: do a served world model's verdicts on a panel of policies agree with the truth?

Why: `worldtune serve` ranks policies by their rollouts in a world model. Whether that ranking means anything is
checked here against the scene's simulator, which knows the truth. For every policy of the scene's scripted panel
(`worldtune.scene.policies`) and every episode seed:

1. the simulator lays the scene out (seed) and starts the task (drawn per seed from `targets`, into the bowl);
2. the policy runs in the simulator (`run_episode`): the true outcome, the simulator's predicate;
3. the same policy runs in the world model through `worldtune serve` (an in-process server on a free port, the
   same `run_episode`, the `WorldModelEnv` started from the simulator's first frames of every camera and given
   what the policy knew there), judged by the server's scene judge (`serve.judge.kind = "scene"`: the success
   detector on the rollout's last frames, with the simulator's cameras);
4. as a control of the judge, the detector also reads the simulator's own final frames shrunk to the model's
   frame size: where it disagrees with the predicate, the judge, not the world model, is wrong.

Per policy: the simulator's and the world model's success rates with 95 % Wilson intervals, the bias (model -
simulator), and the true rate on `truth_episodes` more simulator episodes (no drawing: cheap). Over the panel:
Pearson r, Spearman rho and MMRV of the world model's rates against the simulator's on the same starts
(`worldtune.eval.policy_ranking`). And per policy the prediction-powered estimate of the true rate: the first
`paired` episodes count as the few real rollouts (world-model verdict and truth), the world model's verdicts on
the rest as the many cheap ones; its interval, the classical interval of the paired truth alone, whether each
covers the true rate, and the real rollouts the world model saved.

Writes `results.json` (format `worldtune.policy_benchmark`, version 1), `scatter.png` (world-model against
simulator success, one point a policy, Wilson intervals both ways) and `report.md` (the table and the figures)
to `out`; the recorded rollouts stay under `out/episodes` (`worldtune serve-summary` reads them).
"""

from __future__ import annotations

import json
import platform
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from worldtune.errors import ConfigError
from worldtune.eval.policy_ranking import agreement, ppi_mean
from worldtune.scene.detector import SuccessDetector, cameras_document
from worldtune.scene.episode import CAMERA_NAMES, FEATURE_PREFIX
from worldtune.scene.policies import Policy, panel, run_episode
from worldtune.scene.sim import SceneEnv, start_facts
from worldtune.scene.task import SceneTask
from worldtune.serve.env import WorldModelEnv
from worldtune.serve.ranking import wilson_interval

FORMAT, VERSION = "worldtune.policy_benchmark", 1
REDUCED_PANEL = ("expert", "early-release", "noisy-0.03", "random")  # the CPU's panel: spread from 1 to 0


@dataclass
class BenchmarkSettings:
    """What one benchmark run rolls out (the defaults: the full panel, as a GPU runs it)."""

    dataset: str  # a prepared scene dataset (`worldtune prepare`): the model's camera layout, size, action scaling
    out: str
    model: str = "seed-cosmos3"  # a registry name (model.name) or, with model_path, its folder
    model_path: str | None = None
    adapter: str | None = None  # a forward-dynamics adapter (serve.adapter)
    policies: tuple[str, ...] = ()  # names from the panel; () = all of it
    episodes: int = 50  # per policy, in both the simulator and the world model
    paired: int = 10  # of those, the "real" rollouts of the prediction-powered estimate
    truth_episodes: int = 200  # per policy, simulator only: the true rate
    horizon: int = 32  # actions per episode
    chunk: int = 16  # actions per world-model step
    steps: int = 35  # denoising steps per chunk
    guidance: float = 6.0
    device: str = "auto"
    targets: tuple[str, ...] = ("red", "blue")  # the blocks tasks pick (into the bowl)
    first_seed: int = 10_000  # episode seeds first_seed, first_seed + 1, ...
    scene_seed: int = 0  # the scene's room and layouts (the seed models' room is 0)
    serve_overrides: tuple[str, ...] = ()  # more `--serve.x value` settings
    remote: tuple[str, ...] = ()  # "name=ws://host:port": policies served over openpi's websocket protocol, added

    def check(self) -> None:
        """One-line errors for settings that cannot give the figures."""
        if self.horizon % self.chunk or self.chunk % 4:
            raise ConfigError(f"benchmark: the horizon ({self.horizon}) must be whole chunks of a multiple of 4 "
                              f"actions (chunk {self.chunk})")
        if not 2 <= self.paired <= self.episodes - 2:
            raise ConfigError(f"benchmark: paired = {self.paired} of {self.episodes} episodes: keep at least 2 "
                              "paired and 2 world-model-only episodes per policy (more episodes, or fewer paired)")
        known = {p.name for p in panel()}
        unknown = [p for p in self.policies if p not in known]
        if self.remote:
            from worldtune.scene.remote_policy import remote_policies

            remote_policies(self.remote, connect=lambda url, name: None)  # the specs' form, before the model loads
        if unknown:
            raise ConfigError(f"benchmark: no policy {unknown} in the panel; pick from {sorted(known)}")


@dataclass
class PolicyResult:
    policy: str
    episodes: int
    sim: list[bool] = field(default_factory=list)  # the simulator's predicate, per episode
    model: list[bool] = field(default_factory=list)  # the world model's judged verdict, per episode
    undetermined: int = 0  # world-model rollouts the detector could not read (counted as failures)
    control: list[bool] = field(default_factory=list)  # the detector on the simulator's frames, at the model's size
    truth: list[bool] = field(default_factory=list)  # the simulator on `truth_episodes` other starts

    def summary(self, paired: int) -> dict[str, Any]:
        def rate(xs: list[bool]) -> dict[str, Any]:
            k = int(sum(xs))
            return {"successes": k, "n": len(xs), "rate": k / len(xs), "ci": list(wilson_interval(k, len(xs)))}

        ppi = ppi_mean(self.sim[:paired], self.model[:paired], self.model[paired:])
        truth = rate(self.truth)
        return {"policy": self.policy, "simulator": rate(self.sim), "world_model": rate(self.model),
                "bias": rate(self.model)["rate"] - rate(self.sim)["rate"], "undetermined": self.undetermined,
                "judge_control_agreement": float(np.mean([c == s for c, s in zip(self.control, self.sim)])),
                "truth": truth, "ppi": {**ppi.to_json(), "covers_truth": ppi.ci[0] <= truth["rate"] <= ppi.ci[1],
                                        "classical_covers_truth": ppi.classical_ci[0] <= truth["rate"]
                                        <= ppi.classical_ci[1]}}


def run(settings: BenchmarkSettings) -> dict[str, Any]:
    """Roll the panel out in the simulator and the served world model; write and return the results."""
    settings.check()
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    policies = [p for p in panel() if not settings.policies or p.name in settings.policies]
    if settings.remote:
        from worldtune.scene.remote_policy import remote_policies

        policies += remote_policies(settings.remote)
    cell = cell_size(settings.dataset)
    probe = SceneEnv(cameras=(), height=2 * cell[0], width=2 * cell[1], scene_seed=settings.scene_seed)
    probe.reset(seed=settings.first_seed, task=SceneTask(settings.targets[0]))
    t0 = time.perf_counter()
    server = _serve(settings, out, probe)
    loaded = time.perf_counter() - t0
    try:
        results, seconds = _roll_out(settings, server, policies, cell)
    finally:
        server.shutdown()
        server.close()
        for p in policies:
            getattr(p, "close", lambda: None)()
    seconds["model_load"] = loaded
    report = _report(settings, results, seconds)
    _write(out, report)
    return report


def prepare_dataset(work: str | Path, model: str = "seed-cosmos3", episodes: int = 40) -> Path:
    """A prepared dataset of the scene as a seed model saw it (its recipe's room, tasks, arm paths, camera layout
    and frame size): what the server needs to know the model's cameras and how to scale the scene's actions
    (quantile statistics of these `episodes`). Reused when it is there."""
    from worldtune.data.prepare import run as prepare
    from worldtune.scene.writer import write_demo_dataset
    from worldtune.seed import recipe_for, seed_config

    work = Path(work)
    if (work / "dataset" / "info.json").is_file():
        return work / "dataset"
    recipe = recipe_for(model)
    if not (work / "lerobot" / "meta" / "info.json").is_file():  # small frames: only the actions' statistics count
        write_demo_dataset(work / "lerobot", episodes=episodes, seed=recipe.data_seed, texture_seed=0, height=90,
                           width=160, targets=recipe.targets, rig_jitter=recipe.rig_jitter, workers=1,
                           motion=recipe.motion)
    prepare(seed_config(recipe, work, ["--prepare.workers", "1", "--prepare.val_fraction", "0"]).prepare, quiet=True)
    return work / "dataset"


# ---------------------------------------------------------------------------------------- the two envs
def _serve(settings: BenchmarkSettings, out: Path, probe: SceneEnv):
    """`worldtune serve` in this process on a free port, judged by the detector with the simulator's cameras."""
    from worldtune.config import load_config
    from worldtune.serve.server import start

    cameras = out / "cameras.json"  # the simulator's rig, at the size it draws for the model (set below)
    cameras.write_text(json.dumps(cameras_document(probe.camera_models())))
    model = ["--model.path", settings.model_path] if settings.model_path else ["--model.name", settings.model]
    cfg = load_config(None, [*model, "--serve.dataset", settings.dataset, "--serve.port", "0",
                             "--serve.steps", str(settings.steps), "--serve.guidance", str(settings.guidance),
                             "--serve.device", settings.device, "--serve.record", str(out / "episodes"),
                             "--serve.chunk_size", str(settings.chunk), "--serve.judge.kind", "scene",
                             "--serve.judge.cameras", str(cameras),
                             *(["--serve.adapter", settings.adapter] if settings.adapter else []),
                             *settings.serve_overrides])
    server = start(cfg)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def prompt_template(dataset: str) -> str:
    """The caption the model was trained on, `{task}` for the instruction (the prepared dataset's template): the
    world model is told the task as in training; the simulator and the detector read the task out of it."""
    try:
        template = json.loads((Path(dataset) / "info.json").read_text(encoding="utf-8")).get("prompt_template")
    except (OSError, ValueError):
        template = None
    return template if isinstance(template, str) and "{task}" in template else "{task}"


def cell_size(dataset: str) -> tuple[int, int]:
    """The model's frame size of one camera (a grid's cell) in a prepared dataset. The simulator draws at twice
    it, the same aspect, so the server shrinks each view into its cell exactly (no letterbox) and the detector's
    cameras scale to the cell."""
    from worldtune.data.layout import GridLayout, layout_from_dict

    path = Path(dataset) / "info.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        layout = layout_from_dict(info["layout"])
        h, w = int(info.get("height") or layout.height), int(info.get("width") or layout.width)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"benchmark: {path} is not a prepared dataset's info.json ({e}): give the folder "
                          "`worldtune prepare` wrote for the scene") from None
    return layout.cell_size(h, w) if isinstance(layout, GridLayout) else (h, w)


def _roll_out(settings: BenchmarkSettings, server, policies: list[Policy], cell: tuple[int, int]
              ) -> tuple[list[PolicyResult], dict[str, float]]:
    info = WorldModelEnv(server.url, {}, "", max_chunks=1).server
    sizes = {tuple(v) for v in (info.get("camera_sizes") or {}).values()}
    if sizes != {cell}:
        raise ConfigError(f"benchmark: the server's camera frames are {sorted(sizes)}, the dataset's cells {cell}: "
                          "serve the dataset's size (no serve.height/width overrides)")
    height, width = 2 * cell[0], 2 * cell[1]
    roles = {r: info["camera_keys"][r] for r in info["cameras"]}  # role -> camera key (the scene's feature key)
    drawn = SceneEnv(cameras=CAMERA_NAMES, height=height, width=width, max_steps=settings.horizon,
                     scene_seed=settings.scene_seed)
    blind = SceneEnv(cameras=(), height=height, width=width, max_steps=settings.horizon,
                     scene_seed=settings.scene_seed)
    detector = None
    world = WorldModelEnv(server.url, {}, "", max_chunks=settings.horizon // settings.chunk)
    template = prompt_template(settings.dataset)
    seconds = {"simulator": 0.0, "world_model": 0.0, "truth": 0.0}
    results = []
    for policy in policies:
        res = PolicyResult(policy.name, settings.episodes)
        for k in range(settings.episodes):
            seed = settings.first_seed + k
            options = {"instruction": template.format(task=_task(settings, seed).instruction), "policy": policy.name}
            t = time.perf_counter()
            end, _ = run_episode(blind, policy, seed, options, settings.chunk)
            res.sim.append(bool(end["success"]))
            obs, start = drawn.reset(seed=seed, options=options)
            detector = detector or SuccessDetector(drawn.camera_models(), last=1)
            res.control.append(_control(detector, blind, cell))
            seconds["simulator"] += time.perf_counter() - t
            t = time.perf_counter()
            frames = {FEATURE_PREFIX + n: obs[n] for n in CAMERA_NAMES if FEATURE_PREFIX + n in roles.values()}
            wm, _ = run_episode(world, policy, seed, {**options, "frames": frames, "facts": start_facts(start)},
                                settings.chunk)
            seconds["world_model"] += time.perf_counter() - t
            res.model.append(bool(wm.get("success")))
            status = ((wm.get("judge") or {}).get("rubrics") or {}).get("scene_detector", {}).get("status")
            res.undetermined += status != "ok"
        t = time.perf_counter()
        for k in range(settings.truth_episodes):  # other starts than the paired ones
            seed = settings.first_seed + settings.episodes + k
            end, _ = run_episode(blind, policy, seed, {"instruction": _task(settings, seed).instruction},
                                 settings.chunk)
            res.truth.append(bool(end["success"]))
        seconds["truth"] += time.perf_counter() - t
        results.append(res)
        s = res.summary(settings.paired)
        print(f"{policy.name}: simulator {s['simulator']['rate']:.2f}, world model {s['world_model']['rate']:.2f} "
              f"({settings.episodes} episodes), truth {s['truth']['rate']:.2f}", flush=True)
    world.close()
    return results, seconds


def _task(settings: BenchmarkSettings, seed: int) -> SceneTask:
    """The task of an episode seed: one of `targets`, into the bowl, drawn from the seed."""
    rng = np.random.default_rng([seed, 99])
    return SceneTask(settings.targets[int(rng.integers(len(settings.targets)))])


def _control(detector: SuccessDetector, sim: SceneEnv, cell: tuple[int, int]) -> bool:
    """The detector on the simulator's own last state, drawn at the model's cell size: the judge's own error."""
    import cv2

    views = sim.render_views(("exterior_1_left", "exterior_2_left"))
    small = {n: cv2.resize(v, (cell[1], cell[0]), interpolation=cv2.INTER_AREA) for n, v in views.items()}
    return bool(detector(small, sim.task).success)


# ---------------------------------------------------------------------------------------- the report
def _report(settings: BenchmarkSettings, results: list[PolicyResult], seconds: dict[str, float]) -> dict[str, Any]:
    rows = [r.summary(settings.paired) for r in results]
    names = [r["policy"] for r in rows]
    sim = [r["simulator"]["rate"] for r in rows]
    model = [r["world_model"]["rate"] for r in rows]
    agree = asdict(agreement(names, sim, model)) if len(rows) >= 2 else None
    control = [c == s for r in results for c, s in zip(r.control, r.sim)]
    return {"format": FORMAT, "version": VERSION, "settings": asdict(settings), "policies": rows,
            "agreement": agree, "judge_control_agreement": float(np.mean(control)),
            "ppi_covers_truth": sum(r["ppi"]["covers_truth"] for r in rows),
            "classical_covers_truth": sum(r["ppi"]["classical_covers_truth"] for r in rows),
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "chunks": len(rows) * settings.episodes * settings.horizon // settings.chunk,
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _write(out: Path, report: dict[str, Any]) -> None:
    from worldtune.atomic import atomic_write_json

    atomic_write_json(out / "results.json", report)
    scatter(report, out / "scatter.png")
    (out / "report.md").write_text(markdown(report), encoding="utf-8")


def scatter(report: dict[str, Any], path: Path) -> None:
    """World-model against simulator success, a point per policy with its Wilson intervals, and the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5.2))
    ax.plot([0, 1], [0, 1], color="0.7", lw=1, ls="--", label="agreement")
    for r in report["policies"]:
        x, y = r["simulator"]["rate"], r["world_model"]["rate"]
        (xl, xh), (yl, yh) = r["simulator"]["ci"], r["world_model"]["ci"]
        ax.errorbar(x, y, xerr=[[x - xl], [xh - x]], yerr=[[y - yl], [yh - y]], fmt="o", capsize=3)
        ax.annotate(r["policy"], (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    a = report["agreement"] or {}
    ax.set(xlim=(-0.05, 1.05), ylim=(-0.05, 1.05), xlabel="simulator success", ylabel="world-model success (judged)",
           title=f"{report['settings']['model']}: r {_fmt(a.get('pearson'))}, rho {_fmt(a.get('spearman'))}, "
                 f"MMRV {_fmt(a.get('mmrv'))}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(report: dict[str, Any]) -> str:
    """The results as a markdown section: one row a policy, then the panel's agreement."""
    s, a = report["settings"], report["agreement"] or {}
    lines = [f"Model `{s['model']}`{' + adapter' if s['adapter'] else ''}, {s['episodes']} episodes a policy "
             f"({s['paired']} paired for the prediction-powered estimate), {s['horizon']} actions in chunks of "
             f"{s['chunk']}, {s['steps']} steps, guidance {s['guidance']}; truth: {s['truth_episodes']} more simulator "
             "episodes a policy.", "",
             "| policy | simulator | world model | unreadable | bias | PPI estimate (95 %) | classical, paired only | "
             "truth | real rollouts saved |", "|---|---|---|---|---|---|---|---|---|"]
    for r in report["policies"]:
        p = r["ppi"]
        saved = "-" if p["saved"] is None else f"{p['saved']:+.1f}"
        mark = ("" if p["covers_truth"] else " ✗") + (" (degenerate)" if p.get("degenerate") else "")
        lines.append(f"| {r['policy']} | {_rate(r['simulator'])} | {_rate(r['world_model'])} | "
                     f"{r['undetermined']}/{r['world_model']['n']} | {r['bias']:+.2f} | "
                     f"{p['estimate']:.2f} ({p['ci'][0]:.2f}-{p['ci'][1]:.2f}){mark} | "
                     f"{p['classical']:.2f} ({p['classical_ci'][0]:.2f}-{p['classical_ci'][1]:.2f}) | "
                     f"{r['truth']['rate']:.2f} | {saved} |")
    lines += ["", f"Pearson r {_fmt(a.get('pearson'))}, Spearman rho {_fmt(a.get('spearman'))}, MMRV "
              f"{_fmt(a.get('mmrv'))}, mean absolute bias {_fmt(a.get('mean_abs_bias'))}; the prediction-powered "
              f"interval covers the truth for {report['ppi_covers_truth']} of {len(report['policies'])} policies "
              f"(the classical one for {report['classical_covers_truth']}; "
              f"{sum(bool(r['ppi'].get('degenerate')) for r in report['policies'])} degenerate: paired rollouts "
              "without spread, pair more); unreadable: world-model rollouts in which the detector did not find "
              "the objects in two views (counted as failures); the detector on the simulator's own "
              f"frames at the model's size agrees with the simulator on {100 * report['judge_control_agreement']:.1f} % "
              f"of episodes. {report['chunks']} world-model chunks in {report['seconds']['world_model']:.0f} s "
              f"({report['machine']}, {report['date']})."]
    return "\n".join(lines) + "\n"


def _rate(x: dict[str, Any]) -> str:
    return f"{x['rate']:.2f} ({x['ci'][0]:.2f}-{x['ci'][1]:.2f})"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
