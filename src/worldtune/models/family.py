"""The model families by name: the one table that knows every concrete family.

Stages ask `family_of(spec)` for a spec's family object (models/family_base.py defines what it offers) and
`action_dynamics()` for the action interface (models/action_dynamics.py). Each family module imports only the base
classes and this module imports them all, so imports flow one way (as diffusers keeps `ModelMixin` apart from its
name -> class table). The concrete modules load on first use, so asking about action domains stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worldtune.errors import ModelError

if TYPE_CHECKING:
    from worldtune.models.action_dynamics import ActionDynamics
    from worldtune.models.family_base import ModelFamily


def _families() -> dict[str, type[ModelFamily]]:
    from worldtune.models.cosmos3 import Cosmos3
    from worldtune.models.predict import Predict2, Predict25

    return {f.name: f for f in (Predict25, Predict2, Cosmos3)}


def family_of(spec) -> ModelFamily:
    """The family object of a spec."""
    try:
        return _families()[spec.family](spec)
    except KeyError:
        raise ModelError(f"{spec.name}: unknown model family '{spec.family}'") from None


def family_by_pipeline(pipeline_class: str) -> str | None:
    """The family name of a diffusers pipeline class name (model_index.json), or None."""
    return next((f.name for f in _families().values() if f.pipeline_class == pipeline_class), None)


def supported_pipelines() -> list[str]:
    return [f.pipeline_class for f in _families().values()]


def action_dynamics(spec=None) -> ActionDynamics:
    """The action interface of a spec's family (its one-line error where the family has none). Without a spec, that
    of the action-conditioned family, for what is settled before a model is: `prepare` names the embodiment domain,
    `serve` sizes its camera stream. Loads neither torch nor the family module."""
    if spec is not None:
        return family_of(spec).dynamics()
    from worldtune.models.cosmos3_dynamics import Cosmos3Dynamics

    return Cosmos3Dynamics()


def pipeline_dynamics(pipe) -> ActionDynamics:
    """The action interface of a loaded pipeline's family; for a pipeline of a family without one, the
    action-conditioned family's, whose checks then refuse it in one line."""
    family = next((f for f in _families().values() if f.pipeline_class == type(pipe).__name__), None)
    return family.dynamics_class() if family is not None and family.dynamics_class is not None else action_dynamics()
