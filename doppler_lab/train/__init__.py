"""Training: Stage I (imitation of the Critical Path teacher), Stages II/III (REINFORCE with any
cost function), checkpoints with resume, metrics logs.

Example:
    >>> from doppler_lab.train import preset, train  # doctest: +SKIP
    >>> result = train(preset("imitation", episodes=64), [graph], cluster, out_dir="runs/i")  # doctest: +SKIP
"""

from .cost_functions import CostFunction, SimulatorCost, evaluate_costs
from .loop import Trainer, TrainResult, is_finished, metric_columns, train
from .metrics import read_rows
from .train_config import STAGES, TRAIN_PRESETS, TrainConfig, preset

__all__ = [
    "STAGES",
    "TRAIN_PRESETS",
    "CostFunction",
    "SimulatorCost",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "evaluate_costs",
    "is_finished",
    "metric_columns",
    "preset",
    "read_rows",
    "train",
]
