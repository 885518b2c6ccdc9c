"""Shipped pretrained checkpoints (``data/checkpoints/`` of the repository).

:func:`doppler_lab.house.paths.checkpoint_dirs` finds them whether the package is installed editable
(the repository's ``data/checkpoints``) or not (a copy under the package's ``data/checkpoints``,
under ``<prefix>/share/doppler_lab/checkpoints``, the per-user data folder, or a folder named by
``DOPPLER_LAB_CHECKPOINTS``).
A checkpoint ``<dir>/doppler/llama_block.pt`` is named ``doppler/llama_block`` (the layout
``bench quality`` reads: ``<placer>/<graph>.pt``) and described in ``<dir>/index.json`` (how it
was trained: command, episodes, graph, cluster, seed, final metrics).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..house.errors import CheckpointError
from ..house.paths import checkpoint_dirs
from ..house.userfiles import input_file

#: the shipped general DOPPLER policy (any graph, any device count): ``doppler``'s default
GENERAL_CHECKPOINT = "doppler/general"
#: the general policy trained with memory-bound tasks (feature layout ``doppler11``, the memory
#: headroom): what ``--placer doppler`` without a checkpoint runs where a memory cap can bind
GENERAL_MEMORY_CHECKPOINT = "doppler/general-memory"
#: the general policy that reads the clustering placer's devices (feature layout ``doppler12``,
#: trained with and without them, ``train-general --hint-free``); not a default
GENERAL_HINT_CHECKPOINT = "doppler/general-hint"
#: its weights, placing with the clustering's and the partition placer's devices as hints (a
#: group of rollouts each and one without; ``train-general --hints``); not a default
GENERAL_HINTS_CHECKPOINT = "doppler/general-hints"


def list_checkpoints() -> dict[str, dict[str, Any]]:
    """Shipped checkpoints by name, with their ``index.json`` record (and ``path``)."""
    found: dict[str, dict[str, Any]] = {}
    for d in checkpoint_dirs():
        index = {}
        if (d / "index.json").exists():
            index = json.loads((d / "index.json").read_text()).get("checkpoints", {})
        for p in sorted(d.rglob("*.pt")):
            name = p.relative_to(d).with_suffix("").as_posix()
            if name not in found:
                found[name] = {**index.get(name, {}), "path": str(p)}
    return found


def resolve_checkpoint(spec: str | Path, family: str | None = None) -> Path:
    """A checkpoint path from a path or the name of a shipped checkpoint.

    With ``family`` (a placer name such as ``doppler``) a bare graph name like ``llama_block``
    also finds the shipped ``doppler/llama_block``.
    """
    if not str(spec).strip():
        raise CheckpointError(
            f"checkpoint {str(spec)!r} is empty; expected a checkpoint file or a shipped name"
        )
    p = Path(spec)
    if p.suffix == ".pt" or os.path.lexists(p):
        return input_file(p, "checkpoint", CheckpointError, "MAX_TENSOR_FILE_BYTES")
    shipped = list_checkpoints()
    if str(spec) in shipped:
        return Path(shipped[str(spec)]["path"])
    if family is not None and f"{family}/{spec}" in shipped:
        return Path(shipped[f"{family}/{spec}"]["path"])
    names = ", ".join(sorted(shipped)) or "none found"
    raise CheckpointError(
        f"checkpoint {str(spec)!r} is neither a file nor a shipped checkpoint (shipped: {names}; "
        f"searched {', '.join(str(d) for d in checkpoint_dirs()) or 'no folder'})"
    )
