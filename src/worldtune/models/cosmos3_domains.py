"""Cosmos 3 embodiment domains: which action-projection slot a robot's actions go through.

Cosmos 3's action projections (`DomainAwareLinear`) keep one weight row per embodiment domain, 32 slots in
the released models; a domain fixes the raw action width (a 9-D pose, a 1-D gripper, ... concatenated). A
dataset either matches an existing domain (same width *and* meaning, e.g. DROID's 10-D end-effector pose
deltas + gripper -> `droid_lerobot`) and post-trains that domain's trained rows, or gets a free slot of
its own whose rows are learned from scratch.

The table is diffusers 0.42.1's (`_EMBODIMENT_TO_DOMAIN_ID`, `_EMBODIMENT_TO_RAW_ACTION_DIM`; a test
checks it still is), kept here without importing diffusers so that `prepare` stays light. NVIDIA's
cosmos-framework (release 2026-08-21) already assigns further slots (16, 17, 21, 22, 23) to robots
diffusers does not list; a new robot avoids those too, and is given the highest free slot so that
slots NVIDIA hands out next (in increasing order) stay clear of it.
"""

from __future__ import annotations

from worldtune.errors import ConfigError
from worldtune.models.action_dynamics import ActionDomain

__all__ = ["DOMAIN_IDS", "INPUT_TABLES", "NUM_DOMAINS", "OUTPUT_TABLES", "RAW_WIDTHS", "ROWS_FILE", "ActionDomain",
           "free_domain_ids", "matching_domains", "resolve_domain"]

NUM_DOMAINS = 32  # Cosmos3OmniTransformer.num_embodiment_domains of the released models
DOMAIN_IDS: dict[str, int] = {
    "no_action": 0, "av": 1, "camera_pose": 2, "hand_pose": 3, "pusht": 4, "libero": 5, "umi": 6,
    "bridge_orig_lerobot": 7, "droid_lerobot": 8, "robomind-franka": 8, "galbot": 9, "robomind-franka-dual": 12,
    "robomind-ur": 13, "agibotworld": 15, "agibot_gear_gripper": 15, "agibot_gear_gripper_ext": 15, "fractal": 20,
}
RAW_WIDTHS: dict[str, int] = {
    "av": 9, "camera_pose": 9, "pusht": 2, "umi": 10, "bridge_orig_lerobot": 10, "droid_lerobot": 10,
    "robomind-franka": 10, "robomind-franka-dual": 20, "robomind-ur": 10, "galbot": 30, "agibotworld": 29,
    "agibot_gear_gripper": 29, "agibot_gear_gripper_ext": 29, "fractal": 10, "hand_pose": 57,
}
NVIDIA_ONLY_IDS = frozenset({16, 17, 21, 22, 23})  # cosmos-framework domain_utils.py: YAM, RoboTwin, ... robots
# The per-domain tables (one weight row per slot) and the file of a domain's trained rows beside an adapter
INPUT_TABLES = ("action_proj_in.fc", "action_proj_in.bias")  # actions in: all forward dynamics reads
OUTPUT_TABLES = ("action_proj_out.fc", "action_proj_out.bias")  # actions out: inverse dynamics and policy
ROWS_FILE = "action_domain.safetensors"


def free_domain_ids() -> list[int]:
    """Slots neither diffusers' table nor NVIDIA's framework assigns, highest first."""
    used = set(DOMAIN_IDS.values()) | NVIDIA_ONLY_IDS
    return [i for i in range(NUM_DOMAINS - 1, 0, -1) if i not in used]


def matching_domains(width: int) -> list[str]:
    """Existing domains of this raw width (a hint only: the width alone says nothing about the meaning)."""
    return sorted(n for n, w in RAW_WIDTHS.items() if w == width)


def resolve_domain(name: str | None, domain_id: int | None, width: int, robot: str, where: str) -> ActionDomain:
    """The domain for actions of `width` entries: an existing one by name (its width must match), or a
    new slot (`domain_id`, default the highest free one) named `name` or after the robot.

    `where` names the file the width came from, for the one-line errors."""
    if name is not None and name in RAW_WIDTHS:
        if domain_id is not None and domain_id != DOMAIN_IDS[name]:
            raise ConfigError(f"prepare.actions.domain_id = {domain_id} contradicts domain '{name}' (slot "
                              f"{DOMAIN_IDS[name]}): leave domain_id unset for an existing domain")
        if RAW_WIDTHS[name] != width:
            others = matching_domains(width)
            hint = f"one of {', '.join(others)}" if others else "none exists"
            raise ConfigError(f"{where}: actions are {width}-D but domain '{name}' takes {RAW_WIDTHS[name]}-D actions: "
                              f"convert the actions, choose a {width}-D domain ({hint}), or unset "
                              "prepare.actions.domain for a new domain slot")
        return ActionDomain(name, DOMAIN_IDS[name], width, new=False)
    if name is not None and name in DOMAIN_IDS:  # 'no_action', 'libero': no fixed width to check against
        raise ConfigError(f"domain '{name}' has no fixed action width in Cosmos 3: choose another prepare.actions.domain "
                          "or unset it for a new domain slot")
    free = free_domain_ids()
    if domain_id is None:
        domain_id = free[0]
    elif domain_id not in free:
        raise ConfigError(f"prepare.actions.domain_id = {domain_id} is not a free Cosmos 3 domain slot: choose one of "
                          f"{sorted(free)}")
    label = name or f"{robot or 'robot'}_{width}d"
    return ActionDomain(label, domain_id, width, new=True)
