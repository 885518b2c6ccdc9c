"""The configuration of a placement policy (frozen, validated; saved in every checkpoint)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..house.errors import ConfigError
from ..house.limits import MAX_MP_STEPS, MAX_POLICY_SIZE
from ..house.settings import bad_setting, check_dataclass, dataclass_changes
from ..timing.schedule import ESTIMATES, Estimate, estimate_for, estimate_name
from .encoder import EDGE_MODES
from .features import LAYOUTS

POLICY_KINDS: tuple[str, ...] = ("dual", "sel-only", "plc-only", "placeto", "gdp")
PLACED_NORMS: tuple[str, ...] = ("smooth", "zscore")
#: a policy config's estimate: a model, ``auto`` (fixed at creation) or ``task`` (per graph)
ESTIMATE_CHOICES: tuple[str, ...] = (*ESTIMATES, "auto", "task")


@dataclass(frozen=True)
class PolicyConfig:
    """What a policy is; two checkpoints with different configs are different policies.

    Attributes:
        kind: ``dual`` (learned SEL and PLC), ``sel-only`` (PLC by the Critical Path rule),
            ``plc-only`` (SEL by the Critical Path rule), ``placeto`` or ``gdp``.
        layout: feature layout (:data:`doppler_lab.policies.features.LAYOUTS`).
        estimate: the episode state's estimate (``est``, the released ``additive`` model, or
            ``wc``: link contention and one transfer per tensor and device); device features are
            computed with it. ``auto`` (default): the model of the semantics the policy is
            first trained under (:func:`~doppler_lab.timing.schedule.estimate_for`; ``wc`` for ``wc``,
            ``est`` otherwise), fixed when the policy is made (:meth:`resolved`); checkpoints
            always hold the resolved model (those written before ``auto`` existed hold ``est``).
            ``task``: the model of the semantics of each task the policy places, chosen per graph
            (:meth:`context_estimate`): one policy trained over tasks of several semantics sees
            features that describe the machine that scores each of them.
        hidden: encoder width (DOPPLER), released 128.
        head_hidden: width of the SEL/PLC heads' hidden layer, released 64.
        mp_steps: message-passing rounds, released 6.
        num_bases: edge-conditioned basis matrices (``edge_mode="basis"``).
        edge_mode: ``basis`` (edge coefficients once per pass) or ``nnconv`` (released form).
        edge_hidden: NNConv edge-network width (``edge_mode="nnconv"``), released 128.
        shared_encoder: one encoder for SEL and PLC (released: two).
        placed_norm: how PLC normalises the placed-set sums over the devices: ``smooth``
            (centred, divided by ``sqrt(var + 1)``) or ``zscore`` (divided by the standard
            deviation: scale-free, but its gradient grows as 1 / std when the devices' sums are
            nearly equal, which froze Stage II on some graphs; checkpoints written before this
            option read as ``zscore``).
        placeto_hidden: Placeto embedding width.
        placeto_steps: Placeto message-passing rounds per direction (released 3).
        gdp_hidden: GDP width (released 64).
        gdp_heads: GDP attention heads (released 4).
        gdp_segment: GDP Transformer-XL segment length (released 8).
    """

    kind: str = "dual"
    layout: str = "doppler9"
    estimate: str = "auto"
    hidden: int = 64
    head_hidden: int = 64
    mp_steps: int = 4
    num_bases: int = 8
    edge_mode: str = "basis"
    edge_hidden: int = 128
    shared_encoder: bool = False
    placed_norm: str = "smooth"
    placeto_hidden: int = 8
    placeto_steps: int = 3
    gdp_hidden: int = 64
    gdp_heads: int = 4
    gdp_segment: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "estimate", estimate_name(self.estimate))  # "paper": "additive"
        check_dataclass(self, "policy config", _RANGES)
        for name, allowed in (
            ("kind", POLICY_KINDS),
            ("layout", tuple(sorted(LAYOUTS))),
            ("estimate", ESTIMATE_CHOICES),
            ("edge_mode", EDGE_MODES),
            ("placed_norm", PLACED_NORMS),
        ):
            if getattr(self, name) not in allowed:
                raise bad_setting(
                    "policy config", name, getattr(self, name), f"one of {', '.join(allowed)}"
                )
        if self.gdp_hidden % self.gdp_heads:
            raise ConfigError(
                f"gdp_hidden {self.gdp_hidden} must be a multiple of gdp_heads {self.gdp_heads}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyConfig:
        if "timing" in d and "estimate" not in d:  # its name before 0.2
            d = {("estimate" if k == "timing" else k): v for k, v in d.items()}
        d = dataclass_changes(cls, d, "policy config")
        # written before the option existed: those policies were trained with the z-score; a
        # stored config without an estimate had the old default, est
        return cls(**{"placed_norm": "zscore", "estimate": "est", **d})

    def replace(self, **changes: Any) -> PolicyConfig:
        """This config with ``changes``; an unknown key names the valid ones."""
        changes = dataclass_changes(PolicyConfig, changes, "policy config")
        return PolicyConfig(**{**self.to_dict(), **changes})

    def resolved(self, semantics: str | None = None) -> PolicyConfig:
        """This config with an ``auto`` estimate replaced by the model of ``semantics``."""
        if self.estimate != "auto":
            return self
        return self.replace(estimate=estimate_for(semantics))

    def context_estimate(self, semantics: str | None = None) -> Estimate:
        """The episode state's estimate on a task judged under ``semantics``: the
        config's model, or with ``task`` (or an unresolved ``auto``) the model of ``semantics``
        (``est`` when None)."""
        if self.estimate in ("task", "auto"):
            return estimate_for(semantics)
        return self.estimate  # type: ignore[return-value]


#: bounds of the sizes: every int field is >= 1 and at most these
_RANGES: dict[str, dict[str, float]] = {
    **{
        k: {"minimum": 1, "maximum": MAX_POLICY_SIZE}
        for k in (
            "hidden",
            "head_hidden",
            "num_bases",
            "edge_hidden",
            "placeto_hidden",
            "gdp_hidden",
            "gdp_heads",
            "gdp_segment",
        )
    },
    "mp_steps": {"minimum": 1, "maximum": MAX_MP_STEPS},
    "placeto_steps": {"minimum": 1, "maximum": MAX_MP_STEPS},
}

POLICY_PRESETS: dict[str, PolicyConfig] = {
    # ours: the estimate of the semantics, the extended device features, a cheap
    # edge-conditioned message
    "default": PolicyConfig(),
    # the released architecture and features (two encoders, width 128, 6 steps, z-scored
    # device features from the additive estimate), with our once-per-pass edge weights
    "released": PolicyConfig(
        layout="doppler5", estimate="additive", hidden=128, head_hidden=64, mp_steps=6, num_bases=8
    ),
    # the released form exactly, NNConv edge network re-evaluated each step (speed reference)
    "released-nnconv": PolicyConfig(
        layout="doppler5", estimate="additive", hidden=128, mp_steps=6, edge_mode="nnconv"
    ),
}
