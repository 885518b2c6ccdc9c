"""Parameter checks and scaling shared by the workload generators."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..house.errors import ConfigError
from ..house.limits import MAX_DIM
from ..house.settings import check_setting
from ..house.validate import show

FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16")
#: named values of the ``scale`` parameter: ``tiny`` leaves a few elements per block
NAMED_SCALES: tuple[str, ...] = ("tiny",)


def check_int(generator: str, name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int in ``[minimum, MAX_DIM]``, else a ConfigError naming the parameter."""
    owner = f"workload {generator!r}"
    return check_setting(value, "int", owner, name, "parameter", minimum=minimum, maximum=MAX_DIM)


def check_float(generator: str, name: str, value: Any, positive: bool = True) -> float:
    """``value`` as a finite float (> 0 when ``positive``), else a ConfigError."""
    owner = f"workload {generator!r}"
    return check_setting(value, "float", owner, name, "parameter", above=0 if positive else None)


def check_scale(generator: str, scale: Any, tiny: float) -> float:
    """The size factor ``scale`` (a number > 0, or ``"tiny"``: the generator's ``tiny`` factor)."""
    if scale == "tiny":
        return tiny
    if isinstance(scale, str):
        raise ConfigError(
            f"{generator}: parameter scale={show(scale)}; expected a number > 0 or one of {', '.join(NAMED_SCALES)}"
        )
    return check_float(generator, "scale", scale)


def check_choice(generator: str, name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else a ConfigError listing them."""
    if value not in choices:
        raise ConfigError(
            f"{generator}: parameter {name}={show(value)}; expected one of {', '.join(choices)}"
        )
    return str(value)


def check_dtype(generator: str, dtype: Any) -> str:
    return check_choice(generator, "dtype", dtype, FLOAT_DTYPES)


def check_blocks(generator: str, name: str, blocks: int, dim_name: str, dim: int) -> None:
    """A dimension of size ``dim`` must hold at least ``blocks`` blocks."""
    if blocks > dim:
        raise ConfigError(
            f"{generator}: parameter {name}={blocks} splits {dim_name} (size {dim}) into more "
            f"blocks than it has elements; expected {name} <= {dim}"
        )


def scaled_dim(
    generator: str, dim_name: str, value: int, scale: float, blocks_name: str = "", blocks: int = 1
) -> int:
    """``value * scale`` rounded, never below ``blocks`` (so a scaled graph keeps its shape);
    ``value`` itself must hold ``blocks`` blocks (parameter ``blocks_name``)."""
    check_blocks(generator, blocks_name, blocks, dim_name, value)
    size = value * scale
    if not size <= MAX_DIM:
        raise ConfigError(
            f"workload {generator!r}: {dim_name} {value} at scale {show(scale)} is {size:.3g} "
            f"elements; the limit is {MAX_DIM} (doppler_lab.house.limits.MAX_DIM)"
        )
    return max(blocks, round(size))
