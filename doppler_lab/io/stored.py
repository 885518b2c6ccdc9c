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
imports torch only when it reads or writes a file.
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
        try:
            doc = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many types (UnpicklingError too)
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FormatError(f"cannot read the graph's tensors: {msg}", str(self.path)) from None
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
