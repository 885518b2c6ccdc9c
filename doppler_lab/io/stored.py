"""Tensors that travel with a graph: stored input values and expected outputs.

An imported model's weights, its example inputs and the constants folded at import time are
``input`` nodes whose initialiser is ``stored``; their values live in a :class:`StoredTensors`
attached to the graph (:attr:`doppler_lab.ir.graph.DataflowGraph.tensors`), keyed by node name.
The same object may hold the eager model's outputs (``expected``), the reference of
``doppler-lab execute --check``.

On disk the tensors are a sidecar next to the graph's JSON (``model.json`` ->
``model.tensors.pt``, a ``torch.save`` of ``{"inputs": {name: tensor}, "expected": {...}}``),
named by the graph's ``meta["tensors"]``. A store read from a file loads it on first use, and
pickles as its path only (executor worker processes load the sidecar themselves). This module
imports torch only when it reads, writes or generates tensors.

A model imported without its weights (``weights=none``) has *generated* inputs instead: an
``input`` node whose initialiser is ``normal`` or ``uniform`` with a ``seed`` in its params (a
recipe in the graph JSON, :func:`generated_recipe`); :func:`generate` makes its values on any
device, bit-identical on a CPU and a GPU, so nothing of it travels in the sidecar and a device
makes the weights it reads itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..house.errors import FormatError

SIDECAR_SUFFIX = ".tensors.pt"


def sidecar_path(json_path: str | Path) -> Path:
    """Where the tensors of the graph saved at ``json_path`` go: ``model.json`` ->
    ``model.tensors.pt``."""
    p = Path(json_path)
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(stem + SIDECAR_SUFFIX)


class StoredTensors:
    """Input values and expected outputs by node name (torch tensors), in memory or in a file.

    Args:
        inputs: value of each stored input node, by node name.
        expected: expected value of output nodes, by node name.
        path: a sidecar file to load both from on first use (instead of ``inputs``/``expected``).
    """

    def __init__(
        self,
        inputs: Mapping[str, Any] | None = None,
        expected: Mapping[str, Any] | None = None,
        path: str | Path | None = None,
    ):
        self.path = None if path is None else Path(path)
        self._inputs: dict[str, Any] | None = None
        self._expected: dict[str, Any] | None = None
        if path is None:
            self._inputs = dict(inputs or {})
            self._expected = dict(expected or {})

    @property
    def loaded(self) -> bool:
        return self._inputs is not None

    def _load(self) -> None:
        if self._inputs is not None:
            return
        import torch

        assert self.path is not None
        from ..house.userfiles import input_file, torch_file_problem

        input_file(self.path, "the graph's tensors file", FormatError, "MAX_TENSOR_FILE_BYTES")
        try:
            doc = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many types (UnpicklingError too)
            raise FormatError(
                f"cannot read the graph's tensors: {torch_file_problem(self.path, exc)}; "
                "expected the tensors file doppler-lab import wrote beside the graph",
                str(self.path),
            ) from None
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("inputs"), dict)
            and isinstance(doc.get("expected", {}), dict)
            and all(isinstance(t, torch.Tensor) for t in doc["inputs"].values())
            and all(isinstance(t, torch.Tensor) for t in doc.get("expected", {}).values())
        ):
            raise FormatError(
                "expected a dict {'inputs': {name: tensor}, 'expected': {name: tensor}}",
                str(self.path),
            )
        self._inputs = dict(doc["inputs"])
        self._expected = dict(doc.get("expected", {}))

    @property
    def inputs(self) -> dict[str, Any]:
        """Stored input values by node name (loads the sidecar on first use)."""
        self._load()
        return self._inputs  # type: ignore[return-value]

    @property
    def expected(self) -> dict[str, Any]:
        """Expected output values by node name (loads the sidecar on first use)."""
        self._load()
        return self._expected  # type: ignore[return-value]

    def save(self, path: str | Path) -> Path:
        """Write both mappings to ``path`` atomically (a temporary file, then a rename)."""
        import torch

        from ..house.atomic import atomic_writer

        with atomic_writer(path, "wb") as fh:
            torch.save({"inputs": self.inputs, "expected": self.expected}, fh)
        return Path(path)

    def __getstate__(self) -> dict[str, Any]:
        # a store backed by a file travels as its path: worker processes load it themselves
        if self.path is not None and self.path.exists():
            return {"path": self.path, "_inputs": None, "_expected": None}
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        if not self.loaded:
            return f"StoredTensors(path={str(self.path)!r})"
        return f"StoredTensors(inputs={len(self.inputs)}, expected={len(self.expected)})"


# -- generated weights ---------------------------------------------------------------------------
#: initialisers of a generated weight: an ``input`` node whose params carry a ``seed``
GENERATED_INITS: tuple[str, ...] = ("normal", "uniform")
#: generated seeds stay below 2**53, exact in any JSON reader
MAX_GENERATED_SEED = 2**53 - 1
#: elements generated at a time (bounds the int64/float64 temporaries: 8 MiB each)
_CHUNK = 1 << 20
_M31 = (1 << 31) - 1


def is_generated(kind: str, op: str, params: Mapping[str, Any]) -> bool:
    """Whether an input spec is a generated weight (its values fixed by its recipe, the same
    on every device) rather than a run-seeded input."""
    return kind == "input" and op in GENERATED_INITS and "seed" in params


def generated_recipe(init: str, seed: int, **params: float) -> dict[str, Any]:
    """The params of a generated weight: ``init`` (``normal``: ``mean``, ``std``; ``uniform``:
    ``low``, ``high``) and its ``seed``, checked.

    Raises:
        GraphError: an unknown initialiser, a seed out of range, a bound that is not finite.
    """
    from ..house.errors import GraphError

    if init not in GENERATED_INITS:
        raise GraphError(
            f"generated weight: init {init!r}; expected one of {', '.join(GENERATED_INITS)}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_GENERATED_SEED:
        raise GraphError(f"generated weight: seed {seed!r}; expected an integer in [0, 2**53)")
    allowed = ("mean", "std") if init == "normal" else ("low", "high")
    for key, value in params.items():
        if key not in allowed:
            raise GraphError(
                f"generated weight ({init}): no param {key!r}; expected {', '.join(allowed)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise GraphError(f"generated weight ({init}): {key}={value!r}; expected a number")
        if abs(value) == float("inf"):
            raise GraphError(
                f"generated weight ({init}): {key}={value!r}; expected a finite number"
            )
    return {**params, "seed": int(seed)}


def _mix(x: Any) -> Any:
    """A bijection of 31-bit integers (int64 tensors in [0, 2**31)): xor-shifts and odd
    multipliers below 2**31, so that no product leaves int64 and every device computes the
    same bits."""
    x = ((x ^ (x >> 16)) * 0x2C1B3C6D) & _M31
    x = ((x ^ (x >> 13)) * 0x297A2D39) & _M31
    x = ((x ^ (x >> 16)) * 0x4F6CDD1D) & _M31
    return x ^ (x >> 15)


def _uniforms(start: int, stop: int, seed: int, draws: int, device: Any) -> list[Any]:
    """``draws`` float64 tensors of uniform values in [0, 1) on 24 bits for the elements
    ``start:stop``: a counter-based hash of (seed, element, draw), bit-identical on every
    device."""
    import torch

    i = torch.arange(start, stop, dtype=torch.int64, device=device)
    h = _mix((i & _M31) ^ (seed & _M31))
    h = _mix(h ^ ((i >> 31) & _M31) ^ ((seed >> 31) & _M31))
    del i
    return [
        (_mix(h ^ ((0x5851F42D * (k + 1)) & _M31)) >> 7).to(torch.float64) * 2.0**-24
        for k in range(draws)
    ]


def generate(
    init: str, shape: tuple[int, ...], dtype: Any, params: Mapping[str, Any], device: Any = "cpu"
) -> Any:
    """The tensor a generated weight stands for, made on ``device`` chunk by chunk (the host
    holds nothing when ``device`` is a GPU).

    ``uniform``: ``low + (high - low) * u``; ``normal``: ``mean + std * sqrt(3) * (u1 + u2 + u3
    + u4 - 2)`` (Irwin-Hall: mean and std exact, tails cut at 3.46 std). The ``u`` are 24-bit
    hashes of (seed, element index, draw) computed in integer and float64 arithmetic that every
    device does exactly, so the values are bit-identical on a CPU and a GPU, in any chunking.

    Args:
        init: ``normal`` or ``uniform``.
        shape: the tensor's shape.
        dtype: a torch dtype (values are rounded to it from float64).
        params: the recipe (:func:`generated_recipe`): ``seed`` and the bounds.
        device: where to make it.
    """
    import math

    import torch

    recipe = dict(params)
    seed = recipe.pop("seed")
    generated_recipe(init, seed, **recipe)  # checks
    n = math.prod(shape)
    out = torch.empty(n, dtype=dtype, device=device)
    if init == "normal":
        mean, std = float(recipe.get("mean", 0.0)), float(recipe.get("std", 1.0))
        scale, shift = std * math.sqrt(3.0), mean
    else:
        low, high = float(recipe.get("low", 0.0)), float(recipe.get("high", 1.0))
        scale, shift = high - low, low
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        if init == "normal":
            u = _uniforms(start, stop, seed, 4, device)
            x = (u[0] + u[1] + u[2] + u[3] - 2.0) * scale + shift
        else:
            x = _uniforms(start, stop, seed, 1, device)[0] * scale + shift
        out[start:stop] = x.to(dtype)
        del x
    return out.view(shape)
