"""The training experiments of notebooks 08-10 and the demo, as package calls.

- **Stage ablation** (notebook 08): Stages I+II+III against I+II, II alone, I alone and III alone
  on CPU worker devices, Stage III measuring every episode on the real executor
  (:func:`run_stage_ablation`); learning curves, the protocol's makespans, measured makespans
  of the final placements, convergence statistics.
- **Transfer** (notebook 09): a policy trained on one graph and cluster fine-tuned on another,
  against training from scratch with the same episode budget (:func:`run_transfers`).
- **Scaling** (notebook 10): milliseconds per inference and training episode against graph
  size, DOPPLER against Placeto (:func:`scaling_rows`, :func:`scaling_fit`).
- **Stage III on the real system** (notebook 06): calibration of the CPU workers, simulated
  against measured makespans over many placements, Stage III from a Stage II policy, and both
  policies measured side by side (:func:`run_stage3`, :func:`side_by_side`).
- **Demo helpers**: a short Stage II from a shipped checkpoint (:func:`short_finetune`) and a
  real run of two placements checked against the single-device reference
  (:func:`executor_comparison`).

Learning curves are long frames (one row per logged update: ``episode``, ``cost_mean``,
``cost_min``, ``greedy_cost`` and label columns) for :func:`doppler_lab.viz.learning_curves`.
"""

from ...train.analysis import PolicyRecipe
from .common import (
    CURVE_METRICS,
    convergence_stats,
    cpu_cluster,
    episodes_to_reach,
    greedy_makespan,
    interval_table,
    mean_std_table,
    measure_placements,
    paired_table,
    spec_with,
    stage_curve,
    start_point,
    torch_threads,
)
from .demo_stages import (
    FINETUNE_RECIPE,
    ExecutorComparison,
    ShortFinetune,
    executor_comparison,
    short_finetune,
)
from .real import (
    FIDELITY_MODELS,
    STAGE2_RECIPE,
    STAGE_LABELS,
    SideBySide,
    SideBySideOptions,
    Stage3Options,
    Stage3Run,
    WarmStart,
    calibrate_workers,
    calibrated_simulator,
    comparison_runs,
    fidelity_scatter,
    fidelity_set,
    fidelity_stats,
    improvement,
    measure_fidelity,
    placement_labels,
    policy_rollouts,
    profile_numbers,
    profile_tables,
    real_key_numbers,
    run_stage3,
    shipped_match,
    side_by_side,
    stage2_policy,
)
from .scaling import (
    FIXED_COST_SETTLED,
    SCALING_METHODS,
    ScalingSetup,
    fitted_from,
    scaling_fit,
    scaling_key_numbers,
    scaling_rows,
    speedup_rows,
)
from .stages import (
    STAGE_VARIANTS,
    VARIANT_RUNS,
    StageAblation,
    StageAblationConfig,
    convergence_table,
    run_stage_ablation,
    stage_curve_frames,
    stage_key_numbers,
    stage_table,
)
from .transfer import (
    TransferCase,
    TransferConfig,
    TransferResult,
    case_graph,
    match_row,
    parse_transfer_cases,
    run_transfers,
    source_policy,
    transfer_key_numbers,
    transfer_table,
)

__all__ = [
    "CURVE_METRICS",
    "FIDELITY_MODELS",
    "FINETUNE_RECIPE",
    "SCALING_METHODS",
    "STAGE2_RECIPE",
    "STAGE_LABELS",
    "STAGE_VARIANTS",
    "VARIANT_RUNS",
    "ExecutorComparison",
    "PolicyRecipe",
    "ScalingSetup",
    "ShortFinetune",
    "SideBySide",
    "SideBySideOptions",
    "Stage3Options",
    "Stage3Run",
    "StageAblation",
    "StageAblationConfig",
    "TransferCase",
    "TransferConfig",
    "TransferResult",
    "WarmStart",
    "calibrate_workers",
    "calibrated_simulator",
    "case_graph",
    "comparison_runs",
    "convergence_stats",
    "convergence_table",
    "cpu_cluster",
    "episodes_to_reach",
    "executor_comparison",
    "fidelity_scatter",
    "fidelity_set",
    "fidelity_stats",
    "greedy_makespan",
    "improvement",
    "interval_table",
    "match_row",
    "mean_std_table",
    "measure_fidelity",
    "measure_placements",
    "paired_table",
    "parse_transfer_cases",
    "placement_labels",
    "policy_rollouts",
    "profile_numbers",
    "profile_tables",
    "real_key_numbers",
    "run_stage3",
    "run_stage_ablation",
    "run_transfers",
    "scaling_fit",
    "fitted_from",
    "FIXED_COST_SETTLED",
    "scaling_key_numbers",
    "scaling_rows",
    "shipped_match",
    "short_finetune",
    "side_by_side",
    "source_policy",
    "spec_with",
    "speedup_rows",
    "stage2_policy",
    "stage_curve",
    "stage_curve_frames",
    "stage_key_numbers",
    "stage_table",
    "start_point",
    "torch_threads",
    "transfer_key_numbers",
    "transfer_table",
]
