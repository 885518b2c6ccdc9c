"""Parameter checks and scaling shared by the workload generators."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..validate import is_int, is_number, show

FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16")
#: named values of the ``scale`` parameter: ``tiny`` leaves a few elements per block
NAMED_SCALES: tuple[str, ...] = ("tiny",)


def check_int(generator: str, name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``, else a ConfigError naming the parameter."""
    if not is_int(value) or value < minimum:
        raise ConfigError(
            f"{generator}: parameter {name}={show(value)}; expected an integer >= {minimum}"
        )
    return int(value)


def check_float(generator: str, name: str, value: Any, positive: bool = True) -> float:
    """``value`` as a finite float (> 0 when ``positive``), else a ConfigError."""
    ok = is_number(value) and math.isfinite(value)
    if not ok or (positive and value <= 0):
        raise ConfigError(
            f"{generator}: parameter {name}={show(value)}; expected a finite number{' > 0' if positive else ''}"
        )
    return float(value)


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
    return max(blocks, round(value * scale))
