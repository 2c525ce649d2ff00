"""Action errors normalised by each entry's spread in the training episodes, over the entries that vary.

An entry that is constant in training (a rotation a tabletop robot never uses, a padding dimension) has
no spread to normalise by, and every predictor gets it right; averaging it in as 0 error pulls every
figure down alike (on 7-D actions with 3 constant entries, to 4/7 of what the moving entries score).
So the normalised errors average over the varying entries only, and name the constant ones.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

CONSTANT_STD = 1e-6  #: a training std at or below this: the entry is constant


def constant_entries(std: np.ndarray, names: Sequence[str]) -> list[str]:
    """Names of the entries whose training std is (numerically) zero."""
    return [n for n, s in zip(names, np.asarray(std, np.float64)) if not s > CONSTANT_STD]


def normalised_errors(mse: np.ndarray, mae: np.ndarray | None, std: np.ndarray) -> dict[str, Any]:
    """`normalised_mse` (mean of MSE / std²) and `normalised_mae` (mean of MAE / std) over the varying entries;
    None when no entry varies."""
    std = np.asarray(std, np.float64)
    vary = std > CONSTANT_STD
    out: dict[str, Any] = {"normalised_mse": float((np.asarray(mse)[vary] / std[vary] ** 2).mean())
                           if vary.any() else None}
    if mae is not None:
        out["normalised_mae"] = float((np.asarray(mae)[vary] / std[vary]).mean()) if vary.any() else None
    return out
