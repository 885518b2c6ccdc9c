"""Policy checkpoints: build a policy from its config, save it, load it back with checks.

A checkpoint is a ``torch.save`` dict (loaded with ``weights_only=True``)::

    {"format": "doppler_lab.policy", "version": 1,
     "policy": {"kind", "config", "layout", "num_devices"},
     "state_dict": ..., "meta": {how it was trained}, "train": {optional resume state}}

Loading checks the policy kind, the feature layout (names of every feature) and the device
count, and raises :class:`~doppler_lab.house.errors.CheckpointError` naming what differs. The DOPPLER
networks score each device with shared weights, so a DOPPLER checkpoint runs on any device count
unchanged; for Placeto and GDP another device count is explicit (``allow_device_change=True``)
and re-initialises their device-sized layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from ..house.errors import CheckpointError, ConfigError
from ..house.limits import MAX_DEVICES
from ..house.validate import (
    is_int,
    one_line,
    show,
    type_name,
    want_bool,
    want_fields,
    want_int,
    want_number,
    want_object,
    want_str,
)
from .features import LAYOUTS, hint_names
from .policy_base import PlacementPolicy
from .policy_config import PolicyConfig

CHECKPOINT_FORMAT = "doppler_lab.policy"
CHECKPOINT_VERSION = 1
#: keys of a checkpoint dict (the first five are required) and of its ``policy`` header
CHECKPOINT_FIELDS = ("format", "version", "policy", "state_dict", "meta", "train")
POLICY_HEADER_FIELDS = ("kind", "config", "layout", "num_devices")
#: policies whose networks score each device with shared weights: they run on any device count
#: as saved (Placeto's and GDP's output layers are sized by the device count)
DEVICE_FREE_KINDS = ("dual", "sel-only", "plc-only")


def make_policy(
    config: PolicyConfig, num_devices: int, seed: int = 0, semantics: str | None = None
) -> PlacementPolicy:
    """A freshly initialised policy; the weights depend only on ``seed`` (the global torch RNG
    is left as it was). An ``auto`` estimate becomes the model of ``semantics`` (the simulator
    semantics it will be trained under; ``est`` when None)."""
    config = config.resolved(semantics)
    if config.kind == "gdp":  # GraphSAGE: the one policy that imports torch_geometric
        from .gdp import GDP as cls
    elif config.kind == "placeto":
        from .placeto import Placeto as cls
    else:
        from .doppler import DualPolicy as cls
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(config, num_devices)


def policy_header(policy: PlacementPolicy) -> dict[str, Any]:
    """The identity of a policy as stored in its checkpoint."""
    cfg = policy.config
    return {
        "kind": cfg.kind,
        "config": cfg.to_dict(),
        "layout": LAYOUTS[cfg.layout].to_dict(),
        "num_devices": policy.num_devices,
    }


def save_atomic(doc: Any, path: str | Path, keep_previous: str | Path | None = None) -> Path:
    """``torch.save`` of ``doc`` to ``path`` through a temporary file beside it (a reader never
    sees half a file; an interrupted write leaves the old one); the folder is made.
    ``keep_previous``: where the old ``path`` goes (:func:`doppler_lab.house.atomic.atomic_writer`)."""
    from ..house.atomic import atomic_writer

    with atomic_writer(path, "wb", keep_previous=keep_previous) as fh:
        torch.save(doc, fh)
    return Path(path)


def save_checkpoint(
    path: str | Path,
    policy: PlacementPolicy,
    meta: dict[str, Any] | None = None,
    train: dict[str, Any] | None = None,
    keep_previous: str | Path | None = None,
) -> Path:
    """Write ``policy`` (and optional resume state) to ``path`` atomically (the old file to
    ``keep_previous`` when given)."""
    doc = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "policy": policy_header(policy),
        "state_dict": policy.state_dict(),
        "meta": meta or {},
    }
    if train is not None:
        doc["train"] = train
    return save_atomic(doc, path, keep_previous)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The raw checkpoint dict of ``path`` (format and version checked)."""
    from ..house.userfiles import input_file, torch_file_problem

    p = input_file(path, "checkpoint", CheckpointError, "MAX_TENSOR_FILE_BYTES")
    try:
        doc = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for foreign files
        raise CheckpointError(
            f"checkpoint {str(p)!r} cannot be read: {torch_file_problem(p, exc)}; expected a "
            "policy checkpoint (what train writes, or a shipped name)"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{str(p)!r} is not a doppler_lab policy checkpoint (format "
            f"{show(doc.get('format')) if isinstance(doc, dict) else type(doc).__name__}, "
            f"expected {CHECKPOINT_FORMAT!r})"
        )
    if not is_int(doc.get("version")) or doc.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"checkpoint {str(p)!r} has version {show(doc.get('version'))}, expected {CHECKPOINT_VERSION}"
        )
    _check_types(str(p), doc)
    return doc


def _check_types(path: str, doc: dict[str, Any]) -> None:
    """The types of every part of a checkpoint dict (not yet whether they fit this version)."""

    def fail(msg: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {path!r}: {msg}")

    want_fields(doc, "the checkpoint", fail, CHECKPOINT_FIELDS[:5], CHECKPOINT_FIELDS)
    head = want_fields(doc["policy"], "'policy'", fail, POLICY_HEADER_FIELDS)
    want_str(head["kind"], "policy kind", fail)
    want_object(head["layout"], "policy layout", fail)
    want_int(head["num_devices"], "policy num_devices", fail, 1, MAX_DEVICES)
    config = want_object(head["config"], "policy config", fail)
    defaults = {f.name: f.default for f in fields(PolicyConfig)}
    for key, value in config.items():
        default = defaults.get(key)
        what = f"policy config {key}"
        if isinstance(default, bool):
            want_bool(value, what, fail)
        elif isinstance(default, int):
            want_int(value, what, fail, minimum=1)
        elif isinstance(default, float):
            want_number(value, what, fail)
        elif isinstance(default, str):
            want_str(value, what, fail)
    state = want_object(doc["state_dict"], "'state_dict'", fail)
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise fail(
                f"state_dict entry {show(key)} is {type_name(value)}; expected a tensor by name"
            )
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise fail(
                f"state_dict entry {key!r} holds non-finite weights (nan or inf); expected "
                "finite ones (a run whose training diverged)"
            )
    want_object(doc["meta"], "'meta'", fail)
    if doc.get("train") is not None:
        want_object(doc["train"], "'train'", fail)


def _check_layout(path: str, saved: dict[str, Any]) -> None:
    name = saved.get("name")
    if not isinstance(name, str) or name not in LAYOUTS:
        raise CheckpointError(
            f"checkpoint {path!r} uses feature layout {name!r}, which this version does not "
            f"know; expected one of {sorted(LAYOUTS)}"
        )
    ours = LAYOUTS[name].to_dict()
    for key in ("node", "edge", "device", "device_norm"):
        if saved.get(key) != ours[key]:
            raise CheckpointError(
                f"checkpoint {path!r}: feature layout {name!r} has {key} features "
                f"{saved.get(key)!r}, but this version's layout {name!r} has {ours[key]!r}"
            )


def load_policy(
    path: str | Path,
    kinds: Sequence[str] | None = None,
    num_devices: int | None = None,
    allow_device_change: bool = False,
) -> tuple[PlacementPolicy, dict[str, Any]]:
    """Load a policy; returns ``(policy, checkpoint dict)``.

    Args:
        path: the checkpoint.
        kinds: accepted policy kinds (None: any).
        num_devices: the device count it will run on (None: the saved one).
        allow_device_change: load a Placeto or GDP policy for another device count (its
            device-sized layers re-initialised) instead of failing; DOPPLER policies
            (:data:`DEVICE_FREE_KINDS`) load for any count without it.

    Raises:
        CheckpointError: another policy kind or feature layout; a Placeto/GDP policy for another
            device count; a foreign file.
    """
    sp = str(path)
    doc = read_checkpoint(path)
    head = doc["policy"]
    kind = head.get("kind")
    if kinds is not None and kind not in kinds:
        raise CheckpointError(
            f"checkpoint {sp!r} holds a {kind!r} policy, expected {' or '.join(map(repr, kinds))}"
        )
    _check_layout(sp, head["layout"])
    try:
        config = PolicyConfig.from_dict(dict(head["config"]))
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {sp!r}: {exc}") from None
    saved_d = head["num_devices"]
    d = saved_d if num_devices is None else int(num_devices)
    if d != saved_d and not allow_device_change and kind not in DEVICE_FREE_KINDS:
        raise CheckpointError(
            f"checkpoint {sp!r} was trained for {saved_d} devices, but the cluster has {d}; "
            "fine-tuning to another device count is explicit (allow_device_change=True, "
            "--allow-device-change)"
        )
    policy = make_policy(config, d)
    state = doc["state_dict"]
    try:
        if d == saved_d:
            policy.load_state_dict(state)
        else:
            own = policy.state_dict()
            keep = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
            policy.load_state_dict(keep, strict=False)
            fresh = sorted(set(own) - set(keep))
            if fresh:
                doc["meta"]["reinitialised"] = fresh
    except RuntimeError as exc:  # torch: missing, unexpected or mis-shaped weights
        raise CheckpointError(
            f"checkpoint {sp!r}: its weights do not fit its {kind!r} policy: {one_line(exc)}"
        ) from None
    if "sample_temperature" in doc["meta"]:
        policy.sample_temperature = checked_sample_temperature(
            doc["meta"]["sample_temperature"], f"checkpoint {sp!r}: meta sample_temperature"
        )
    if "hints" in doc["meta"]:
        policy.hints = checked_hints(doc["meta"]["hints"], f"checkpoint {sp!r}: meta hints")
    return policy, doc


def checked_hints(value: Any, what: str) -> tuple[str, ...]:
    """``value`` as the hints a policy places with (:data:`~doppler_lab.policies.features.HINTS`,
    each once; none: every rollout without a hint; a string: comma- or ``+``-separated, ``none``
    for none).

    Raises:
        CheckpointError: naming ``what`` and what was expected.
    """
    try:
        return hint_names(value, what)
    except ConfigError as exc:  # a checkpoint's file is what is wrong: its own error class
        raise CheckpointError(str(exc)) from None


def set_hints(path: str | Path, hints: Sequence[str] | None) -> Path:
    """Record in the checkpoint at ``path`` the heuristics whose placements the ``doppler``
    placer gives its policy as hints (:attr:`~doppler_lab.policies.policy_base.PlacementPolicy.hints`;
    None: remove them, so it places with the clustering's). The weights are left as they are."""
    doc = read_checkpoint(path)
    meta = dict(doc["meta"])
    if hints is None:
        meta.pop("hints", None)
    else:
        meta["hints"] = list(checked_hints(list(hints), f"hints for {str(path)!r}"))
    doc["meta"] = meta
    return save_atomic(doc, path)


def checked_sample_temperature(value: Any, what: str) -> float:
    """``value`` as a PLC sampling temperature (a finite number > 0), else a
    :class:`CheckpointError` that names ``what``."""
    return want_number(value, what, CheckpointError, above=0)


def set_sample_temperature(path: str | Path, temperature: float | None) -> Path:
    """Record in the checkpoint at ``path`` the PLC temperature its sampled rollouts use
    (:attr:`~doppler_lab.policies.policy_base.PlacementPolicy.sample_temperature`; None: remove it,
    so they sample at 1). The weights are left as they are."""
    doc = read_checkpoint(path)
    meta = dict(doc["meta"])
    if temperature is None:
        meta.pop("sample_temperature", None)
    else:
        meta["sample_temperature"] = checked_sample_temperature(
            temperature, f"sample temperature for {str(path)!r}"
        )
    doc["meta"] = meta
    return save_atomic(doc, path)


def widen_checkpoint(
    path: str | Path, layout: str, out: str | Path, like: dict[str, str] | None = None
) -> Path:
    """Save the DOPPLER policy of ``path`` with the wider feature layout ``layout`` to ``out``:
    the same node and edge features and normalisation, the saved device features first; the
    new device features enter PLC's first layer through zero weights, so the widened policy
    places exactly as the saved one until training moves them, or, for a new feature named in
    ``like``, through a copy of the weights of the saved feature it names (a start that already
    reads it as that one).

    Raises:
        CheckpointError: not a DOPPLER policy, or ``layout`` does not extend the saved layout.
    """
    sp = str(path)
    policy, doc = load_policy(path, DEVICE_FREE_KINDS)
    old = LAYOUTS[policy.config.layout]
    if layout not in LAYOUTS:
        raise CheckpointError(
            f"unknown feature layout {layout!r}; expected one of {sorted(LAYOUTS)}"
        )
    new = LAYOUTS[layout]
    extends = (
        new.node == old.node
        and new.edge == old.edge
        and new.device_norm == old.device_norm
        and new.device[: old.device_dim] == old.device
    )
    if not extends:
        raise CheckpointError(
            f"checkpoint {sp!r}: layout {layout!r} (device features {list(new.device)}) does not "
            f"extend its layout {old.name!r} (device features {list(old.device)}): expected the "
            "same node and edge features with more device features after the saved ones"
        )
    like = dict(like or {})
    for new_name, old_name in like.items():
        if new_name not in new.device[old.device_dim :] or old_name not in old.device:
            raise CheckpointError(
                f"widening {sp!r} to {layout!r}: like={{{new_name!r}: {old_name!r}}} must map a "
                f"new device feature {list(new.device[old.device_dim :])} to a saved one "
                f"{list(old.device)}"
            )
    wide = make_policy(policy.config.replace(layout=layout), policy.num_devices)
    state = policy.state_dict()
    own = wide.state_dict()
    for key, value in own.items():
        saved = state[key]
        if saved.shape == value.shape:
            own[key] = saved
        else:  # a device-feature input layer: the saved columns, then zeros or copies
            own[key] = torch.zeros_like(value)
            own[key][..., : saved.shape[-1]] = saved
            for new_name, old_name in like.items():
                col = own[key][..., old.device.index(old_name)]
                own[key][..., new.device.index(new_name)] = col
    wide.load_state_dict(own)
    meta = {**doc["meta"], "widened_from": {"checkpoint": sp, "layout": old.name, "like": like}}
    return save_checkpoint(out, wide, meta)
