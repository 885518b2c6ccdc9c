"""The ``torch.export`` path of :mod:`doppler_lab.importers`: export, decompose, check, fold
constants, group ops into nodes, count flops, build the graph with its stored tensors."""

from __future__ import annotations

import logging
import math
import operator
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils._pytree import tree_leaves

from ..house.errors import ConfigError, ImportModelError
from ..house.validate import exception_line, show
from ..io.stored import StoredTensors
from ..ir.graph import DataflowGraph, GraphBuilder
from ..ir.ops import DTYPE_BYTES, OpSpec
from ..ir.program import TORCH_DTYPE_NAMES, Program
from .flop_counts import op_flops
from .options import GRANULARITIES, WEIGHTS

#: ops kept whole by the decompositions (a full decomposition of SDPA fails on GPT-2)
KEPT_OPS: tuple[str, ...] = (
    "linear.default",
    "scaled_dot_product_attention.default",
    "layer_norm.default",
)
#: ops dropped from the exported graph (runtime checks on shapes and values)
_DROPPED_PREFIXES: tuple[str, ...] = ("_assert", "sym_constrain_range")


# -- entry points ------------------------------------------------------------------------------
def _check_options(
    granularity: str, depth: int | None, weights: str = "stored", merge: bool = True
) -> None:
    if not isinstance(merge, bool):  # merge=2, merge=0 or merge=no: never read as truthy
        raise ConfigError(f"import option merge={show(merge)}; expected true or false")
    if granularity not in GRANULARITIES:
        raise ConfigError(f"granularity {granularity!r}; expected one of {GRANULARITIES}")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
        raise ConfigError(f"depth {depth!r}; expected None or an integer >= 0")
    if weights not in WEIGHTS:
        raise ConfigError(f"weights {weights!r}; expected one of {', '.join(WEIGHTS)}")


@contextmanager
def _quiet_torch() -> Iterator[None]:
    """torch 2.13's export pickles its own pytree specs through a check it deprecated itself: a
    FutureWarning on every import that the user can do nothing about. And torch's loggers are
    off meanwhile, and what it writes to ``sys.stderr`` is held back until the export succeeds:
    a failed export printed its partial graph twice (14 lines for a 3-line forward) before the
    one line that says what failed."""
    import contextlib
    import io
    import logging
    import sys

    import torch.fx.experimental.symbolic_shapes  # noqa: F401 - its logger exists from here

    loggers = [
        logger
        for name, logger in list(logging.root.manager.loggerDict.items())
        if (name == "torch" or name.startswith("torch.")) and isinstance(logger, logging.Logger)
    ]
    was = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    held, ok = io.StringIO(), False
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(held):
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            yield
        ok = True
    finally:
        for logger, disabled in zip(loggers, was):
            logger.disabled = disabled
        if ok and held.getvalue():
            sys.stderr.write(held.getvalue())


def import_module(
    model: torch.nn.Module,
    example_args: Any,
    granularity: str,
    depth: int | None,
    merge: bool,
    name: str | None,
    weights: str = "stored",
    seed: int = 0,
) -> DataflowGraph:
    """:func:`doppler_lab.importers.from_module`."""
    _check_options(granularity, depth, weights, merge)
    if not isinstance(model, torch.nn.Module):
        raise ImportModelError(f"expected a torch.nn.Module, got {type(model).__name__}")
    for bname, buf in model.named_buffers():
        if buf.device.type == "meta":
            raise ImportModelError(
                f"buffer {bname!r} is on the meta device: its values are needed (build the "
                "model with doppler_lab.importers.weights.params_on_meta, which keeps buffers)"
            )
    if any(p.device.type == "meta" for p in model.parameters()):
        weights = "none"  # nothing to store: the parameters become generated weights
    kwargs: dict[str, Any] = {}
    if isinstance(example_args, Mapping):  # keyword inputs (input_ids=..., attention_mask=...)
        args, kwargs = (), dict(example_args)
    elif isinstance(example_args, list | tuple):
        args = tuple(example_args)
    else:
        args = (example_args,)
    modes = {m: m.training for m in model.modules()}
    model.eval()
    generated = weights == "none"
    try:
        expected: list[torch.Tensor] | None = None
        if not generated:
            try:
                with torch.no_grad():
                    eager = model(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's model failed on its own inputs
                raise ImportModelError(
                    f"{type(model).__name__} fails on its example inputs: {exception_line(exc)}"
                ) from None
            expected = [t for t in tree_leaves(eager) if isinstance(t, torch.Tensor)]
        try:
            with _quiet_torch(), _maybe_fake(model, generated):
                ep = torch.export.export(model, args, kwargs)
        except ImportModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - data-dependent control flow, unsupported ops
            raise ImportModelError(
                f"torch.export cannot export {type(model).__name__}: {exception_line(exc)}"
            ) from None
    finally:
        for m, training in modes.items():
            m.train(training)
    recipes = _recipes(ep, model, seed) if generated else None
    return _Importer(ep, args, kwargs, expected, name or type(model).__name__, recipes).run(
        granularity, depth, merge
    )


@contextmanager
def _maybe_fake(model: torch.nn.Module, generated: bool) -> Iterator[None]:
    """The model's parameters as fake tensors (generated weights), else as they are."""
    if not generated:
        yield
        return
    from .weights import fake_parameters

    with fake_parameters(model):
        yield


def _recipes(ep: Any, model: torch.nn.Module | None, seed: int) -> dict[str, tuple[str, dict]]:
    """The generated-weight recipe of each parameter of ``ep``, by state-dict name; module
    classes from ``model``, else from the exported graph's module stacks."""
    from .weights import module_classes, recipe_for

    if model is not None:
        classes = module_classes(model)
    else:
        classes = {}
        for n in ep.graph.nodes:
            for path, cls in _scope_stack(n):
                classes.setdefault(path, cls)
    out: dict[str, tuple[str, dict]] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.PARAMETER and spec.target is not None:
            path = spec.target.rpartition(".")[0]
            out[spec.target] = recipe_for(spec.target, classes.get(path, ""), seed)
    return out


def load_exported(path: str | Path, trust: bool | None = None) -> Any:
    """An ``ExportedProgram`` saved by ``torch.export.save``; refused unless the file is
    trusted (``trust``, else :func:`doppler_lab.house.trust.pt2_trusted`): loading one can run code
    stored in it."""
    from ..house.trust import check_pt2_trusted

    check_pt2_trusted(path, trust)
    export_log = logging.getLogger("torch.export")
    was = export_log.disabled
    export_log.disabled = True  # torch logs a multi-line traceback before raising
    try:
        with _quiet_torch():
            return torch.export.load(str(path))
    except Exception as exc:  # noqa: BLE001 - not a zip, another torch's format
        raise ImportModelError(
            f"{path}: not a saved ExportedProgram: {exception_line(exc)}"
        ) from None
    finally:
        export_log.disabled = was


def import_exported(
    ep: Any,
    granularity: str,
    depth: int | None,
    merge: bool,
    name: str | None,
    weights: str = "stored",
    seed: int = 0,
) -> DataflowGraph:
    """:func:`doppler_lab.importers.from_exported` on a program in memory."""
    _check_options(granularity, depth, weights, merge)
    if not isinstance(ep, torch.export.ExportedProgram):
        raise ImportModelError(f"expected a torch.export.ExportedProgram, got {type(ep).__name__}")
    if ep.example_inputs is None:
        raise ImportModelError(
            "the exported program carries no example inputs (export it with its inputs)"
        )
    args, kwargs = ep.example_inputs
    recipes = _recipes(ep, None, seed) if weights == "none" else None
    return _Importer(ep, tuple(args), dict(kwargs or {}), None, name or "exported", recipes).run(
        granularity, depth, merge
    )


# -- the importer ------------------------------------------------------------------------------
@dataclass
class _Unit:
    """The smallest piece a node is made of: one op, or a tuple op and the getitem taking one
    of its elements. Its value is the tensor of ``nodes[-1]``."""

    nodes: list[fx.Node]
    pos: int  # export index of its output
    stack: list[tuple[str, str]]  # (module path, class name), root first
    consumers: set[int] = field(default_factory=set)  # units reading its value
    is_output: bool = False


def _scope_stack(node: fx.Node) -> list[tuple[str, str]]:
    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for path, cls in stack.values():
        cname = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
        out.append((str(path), cname.rsplit(".", 1)[-1]))
    return out


def where(node: fx.Node) -> str:
    """How errors name the module of ``node``: ``module 'layers.0.attn' (Attention)``."""
    stack = _scope_stack(node)
    if not stack:
        return "the top-level module"
    path, cls = stack[-1]
    return f"module {path!r} ({cls})" if path else f"the top-level module ({cls})"


def op_name(target: Any) -> str:
    """``aten.mm.default`` for an aten overload, ``getitem`` for indexing."""
    if target is operator.getitem:
        return "getitem"
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def _fail(node: fx.Node, what: str) -> ImportModelError:
    target = node.target
    if target is operator.getitem and isinstance(node.args[0], fx.Node):
        target = node.args[0].target  # name the op whose tuple result it reads
    return ImportModelError(f"op {op_name(target)} in {where(node)}: {what}")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_static(shape: Sequence[Any]) -> bool:
    return all(type(d) is int for d in shape)


def _scope_path(stack: list[tuple[str, str]], depth: int | None) -> str:
    """The module path naming a scope: the innermost, or ``depth`` levels below the root."""
    if not stack:
        return ""
    return stack[min(len(stack) - 1, depth)][0] if depth is not None else stack[-1][0]


def _has_no_data(t: torch.Tensor) -> bool:
    """A meta tensor, or a fake one (a meta tensor reporting another device)."""
    from torch._subclasses.fake_tensor import is_fake

    return t.device.type == "meta" or is_fake(t)


def _draws_random(n: fx.Node) -> bool:
    """Whether a seeded op really draws: attention with ``dropout_p == 0`` does not."""
    if n.target is torch.ops.aten.scaled_dot_product_attention.default:
        p = n.kwargs.get("dropout_p", n.args[4] if len(n.args) > 4 else 0.0)
        return bool(p)
    return True


class _Importer:
    """One import: holds the exported program and what is learned about its nodes."""

    def __init__(
        self,
        ep: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        expected: list[torch.Tensor] | None,
        name: str,
        recipes: dict[str, tuple[str, dict]] | None = None,
    ):
        self.ep0 = ep
        self.args, self.kwargs = args, kwargs
        self.expected = expected
        self.name = name
        self.recipes = recipes  # generated weights: parameters are made from these

    # -- stages ---------------------------------------------------------------------------------
    def run(self, granularity: str, depth: int | None, merge: bool) -> DataflowGraph:
        self._check_signature(self.ep0, before=True)
        self.ep = self._decompose(self.ep0)
        self._check_signature(self.ep, before=False)
        self._read_nodes()
        self._fold_constants()
        units = self._units()
        groups = self._groups(units, granularity, depth, merge and granularity == "scope")
        return self._build(units, groups, granularity, depth, merge)

    def _check_signature(self, ep: Any, before: bool) -> None:
        """State updates (a training-mode BatchNorm, a counter buffer) and user-input mutations
        cannot be replayed as a dataflow graph."""
        sig = ep.graph_signature
        outputs = list(ep.graph.output_node().args[0])
        for spec, node in zip(sig.output_specs, outputs):
            if spec.kind in (OutputKind.USER_OUTPUT,):
                continue
            what = {
                OutputKind.BUFFER_MUTATION: f"updates buffer {spec.target!r} (training mode? "
                "call model.eval(); a forward pass must not change state)",
                OutputKind.USER_INPUT_MUTATION: f"writes into the input {spec.target!r} in place",
                OutputKind.PARAMETER_MUTATION: f"updates parameter {spec.target!r}",
            }.get(spec.kind, f"has an output of kind {spec.kind.name} (training mode?)")
            if isinstance(node, fx.Node) and node.op == "call_function":
                raise _fail(node, what)
            raise ImportModelError(f"the model {what}")
        if before:
            return
        for spec in sig.input_specs:
            if spec.kind in (InputKind.CUSTOM_OBJ, InputKind.TOKEN):
                raise ImportModelError(
                    f"input {spec.arg.name!r} is a {spec.kind.name.lower()} (custom objects and "
                    "side effects are not supported)"
                )

    def _decompose(self, ep: Any) -> Any:
        table = torch.export.default_decompositions()
        for key in KEPT_OPS:
            packet, overload = key.split(".")
            op = getattr(getattr(torch.ops.aten, packet), overload)
            if op in table:
                del table[op]
        try:
            with _quiet_torch():
                return ep.run_decompositions(table)
        except Exception as exc:  # noqa: BLE001
            raise ImportModelError(
                f"decomposing the exported program failed: {exception_line(exc)}"
            ) from None

    def _read_nodes(self) -> None:
        """Placeholders and their values, the live ops, the checks on each op."""
        ep = self.ep
        graph = ep.graph
        self.index = {n: i for i, n in enumerate(graph.nodes)}
        out_node = graph.output_node()
        sig = ep.graph_signature
        user_leaves = tree_leaves((self.args, self.kwargs))
        self.values: dict[fx.Node, Any] = {}  # real values of constants and user inputs
        self.generated: dict[fx.Node, tuple[str, dict]] = {}  # parameters made from recipes
        self.user_inputs: list[fx.Node] = []
        self.input_names: dict[fx.Node, str] = {}
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        user_specs = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
        if len(user_specs) != len(user_leaves):
            tensors = [x for x in user_leaves if isinstance(x, torch.Tensor)]
            if len(tensors) != len(user_specs):
                raise ImportModelError(
                    f"{len(user_leaves)} example inputs for {len(user_specs)} user inputs of the "
                    "exported program"
                )
            user_leaves = tensors
        user_iter = iter(user_leaves)
        state = {**ep.state_dict, **ep.constants}
        for node, spec in zip(placeholders, sig.input_specs):
            if spec.kind == InputKind.USER_INPUT:
                value = next(user_iter)
                val = node.meta.get("val")
                if isinstance(val, torch.Tensor) and not _is_static(val.shape):
                    raise ImportModelError(
                        f"input {node.name!r} has the dynamic shape {tuple(val.shape)}; "
                        "export with static shapes (no dynamic_shapes)"
                    )
                if node.users and not isinstance(value, torch.Tensor):
                    raise ImportModelError(
                        f"input {node.name!r} is a {type(value).__name__}, expected a tensor"
                    )
                self.values[node] = value
                self.user_inputs.append(node)
                self.input_names[node] = node.name
            elif self.recipes is not None and spec.target in self.recipes:
                self.generated[node] = self.recipes[spec.target]  # its value: node.meta["val"]
                self.input_names[node] = str(spec.target)
            else:
                target = spec.target
                if target not in state:
                    raise ImportModelError(f"input {node.name!r}: no value for {target!r}")
                value = state[target]
                if isinstance(value, torch.Tensor) and _has_no_data(value):
                    raise ImportModelError(
                        f"input {node.name!r} ({target!r}) has no values (a meta or fake "
                        "tensor); only parameters can be generated weights"
                    )
                self.values[node] = value
                self.input_names[node] = str(target)
        # live ops: reachable backwards from the user outputs
        outputs = list(out_node.args[0])
        self.outputs: list[fx.Node] = []
        for i, (spec, o) in enumerate(zip(sig.output_specs, outputs)):
            if spec.kind != OutputKind.USER_OUTPUT:
                continue
            if not isinstance(o, fx.Node) or not isinstance(o.meta.get("val"), torch.Tensor):
                raise ImportModelError(
                    f"output {i} is {o!r}, not a tensor; outputs must be tensors computed from "
                    "the inputs"
                )
            self.outputs.append(o)
        live: set[fx.Node] = set()
        stack = list(self.outputs)
        while stack:
            n = stack.pop()
            if n in live:
                continue
            live.add(n)
            stack.extend(n.all_input_nodes)
        self.live = live
        self.ops = [n for n in graph.nodes if n.op == "call_function" and n in live]
        for n in self.ops:
            self._check_op(n)

    def _check_op(self, n: fx.Node) -> None:
        t = n.target
        if t is operator.getitem:
            return
        if not isinstance(t, torch._ops.OpOverload):
            if getattr(t, "__module__", "") in ("_operator", "operator") or "sym" in op_name(t):
                raise _fail(
                    n, "computes on symbolic sizes (dynamic shapes); export with static shapes"
                )
            raise _fail(
                n, "is not an aten op (higher-order ops and Python calls are not supported)"
            )
        if t._opname.startswith(_DROPPED_PREFIXES):
            raise _fail(n, "a runtime check feeds the outputs")  # only reached if live
        if torch.Tag.nondeterministic_seeded in t.tags and _draws_random(n):
            raise _fail(
                n,
                "is a random op; its values cannot be replayed (dropout in training mode? "
                "call model.eval())",
            )
        if t._schema.is_mutable:
            raise _fail(n, "is an in-place op that survives functionalisation")
        val = n.meta.get("val")
        vals = val if isinstance(val, list | tuple) else [val]
        for v in vals:
            if isinstance(v, torch.Tensor):
                if not _is_static(v.shape):
                    raise _fail(
                        n, f"has the dynamic shape {tuple(v.shape)}; export with static shapes"
                    )
                if _dtype_name(v.dtype) not in DTYPE_BYTES:
                    raise _fail(
                        n,
                        f"produces dtype {_dtype_name(v.dtype)}; expected one of {tuple(DTYPE_BYTES)}",
                    )
            elif v is not None or val is None:
                raise _fail(n, f"produces {type(v).__name__}, expected tensors (dynamic shapes?)")

    def _fold_constants(self) -> None:
        """Every op that reads no user input is computed now; the values that ops reading a
        user input need become stored inputs."""
        user = set(self.user_inputs)
        self.const: set[fx.Node] = {n for n in self.values if n not in user}
        with torch.no_grad():
            for n in self.ops:
                if any(a not in self.const for a in n.all_input_nodes):
                    continue
                args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: self.values[a])
                try:
                    self.values[n] = n.target(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001
                    raise _fail(
                        n, f"failed while folding constants: {exception_line(exc)}"
                    ) from None
                self.const.add(n)
                self.input_names[n] = f"folded/{n.name}"
        self.compute = [n for n in self.ops if n not in self.const]
        computed = set(self.compute)
        for i, o in enumerate(self.outputs):
            if o in user:
                raise ImportModelError(
                    f"output {i} ({o.name}) is an input returned as is; outputs must be "
                    "computed from the inputs by an op"
                )
            if o not in computed:
                raise ImportModelError(
                    f"output {i} ({o.name}) does not depend on a user input; outputs must be "
                    "computed from the inputs"
                )

    def _units(self) -> list[_Unit]:
        """One unit per op producing a tensor; a tuple op goes with each getitem that reads it."""
        units: list[_Unit] = []
        self.unit_of: dict[fx.Node, int] = {}  # output node -> unit
        for n in self.compute:
            val = n.meta.get("val")
            if n.target is operator.getitem:
                src = n.args[0]
                if not isinstance(src, fx.Node) or src.target is operator.getitem:
                    raise _fail(n, "indexes something other than an op's tuple result")
                members = [src, n]
                scope_node = src
            elif isinstance(val, torch.Tensor):
                members, scope_node = [n], n
            else:
                bad = [u for u in n.users if u.target is not operator.getitem]
                if bad:
                    raise _fail(n, f"returns a tuple read whole by {bad[0].name}; expected getitem")
                continue  # each getitem makes a unit with it
            units.append(_Unit(members, self.index[n], _scope_stack(scope_node)))
            self.unit_of[n] = len(units) - 1
        outs = set(self.outputs)
        for u in units:
            out = u.nodes[-1]
            u.is_output = out in outs
            for user in out.users:
                if user in self.unit_of:
                    u.consumers.add(self.unit_of[user])
                elif user.op == "call_function" and user in self.live:
                    # a tuple op reading this value: every unit built on that tuple op
                    u.consumers.update(self.unit_of[g] for g in user.users if g in self.unit_of)
        return units

    def _groups(
        self, units: list[_Unit], granularity: str, depth: int | None, merge: bool
    ) -> list[list[int]]:
        """Units into nodes: runs of one scope, split until each has one output, then merged."""

        def key(u: _Unit) -> str:
            return _scope_path(u.stack, depth)

        groups: list[list[int]] = []
        if granularity == "op":
            groups = [[k] for k in range(len(units))]
        else:
            for k, u in enumerate(units):
                if groups and key(units[groups[-1][-1]]) == key(u):
                    groups[-1].append(k)
                else:
                    groups.append([k])
        # split a group at every unit whose value leaves it, until each has one such unit
        changed = True
        while changed:
            changed = False
            group_of = {k: g for g, ks in enumerate(groups) for k in ks}
            new: list[list[int]] = []
            for g, ks in enumerate(groups):
                parts: list[list[int]] = []
                part: list[int] = []
                for k in ks:
                    part.append(k)
                    u = units[k]
                    if u.is_output or any(group_of[c] != g for c in u.consumers):
                        parts.append(part)
                        part = []
                if part:  # units nobody reads cannot trail a run once dead code is gone
                    parts.append(part)
                changed |= len(parts) > 1
                new.extend(parts)
            groups = new
        if merge:
            groups = self._merge(units, groups)
        return groups

    def _merge(self, units: list[_Unit], groups: list[list[int]]) -> list[list[int]]:
        """Fold each flop-free group into its only consumer (in export order, so chains fold)."""
        group_of = {k: g for g, ks in enumerate(groups) for k in ks}
        alive = [True] * len(groups)
        members = [list(ks) for ks in groups]
        for g, ks in enumerate(groups):
            out = units[ks[-1]]
            if out.is_output or sum(
                self.flops.get(n, 0) for k in members[g] for n in units[k].nodes
            ):
                continue
            targets = {group_of[c] for c in out.consumers}
            if len(targets) != 1:
                continue
            (t,) = targets
            members[t] = members[g] + members[t]
            for k in members[g]:
                group_of[k] = t
            alive[g] = False
        return [
            sorted(members[g], key=lambda k: units[k].pos) for g in range(len(groups)) if alive[g]
        ]

    @property
    def flops(self) -> dict[fx.Node, int]:
        """Flops of each compute op under fake tensors (computed once)."""
        if not hasattr(self, "_flops"):
            from torch._guards import detect_fake_mode

            vals = [n.meta.get("val") for n in self.ep.graph.nodes if n.op == "placeholder"]
            fake_mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
            flops: dict[fx.Node, int] = {}
            for n in self.compute:
                if n.target is operator.getitem:
                    continue
                args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: a.meta["val"])
                try:
                    flops[n] = op_flops(n.target, args, kwargs, fake_mode)
                except Exception as exc:  # noqa: BLE001
                    raise _fail(
                        n, f"cannot be run on fake tensors: {exception_line(exc)}"
                    ) from None
            self._flops = flops
        return self._flops

    # -- the graph ------------------------------------------------------------------------------
    def _build(
        self,
        units: list[_Unit],
        groups: list[list[int]],
        granularity: str,
        depth: int | None,
        merge: bool,
    ) -> DataflowGraph:
        b = GraphBuilder(
            self.name,
            meta={
                "source": "torch.export",
                "model": self.name,
                "granularity": granularity,
                "depth": depth,
                "merge": bool(merge) and granularity == "scope",
                "weights": "stored" if self.recipes is None else "none",
                "torch": torch.__version__.split("+")[0],
            },
        )
        flops = self.flops
        node_of: dict[fx.Node, int] = {}
        stored: dict[str, torch.Tensor] = {}
        # inputs: user inputs, then constants in first-use order
        used: list[fx.Node] = []
        seen: set[fx.Node] = set()
        for ks in groups:
            for k in ks:
                for m in units[k].nodes:
                    for a in m.all_input_nodes:
                        if (a in self.values or a in self.generated) and a not in seen:
                            seen.add(a)
                            used.append(a)
        user = set(self.user_inputs)
        used.sort(key=lambda a: (a not in user, 0))
        taken: set[str] = set()  # input names
        for a in used:
            name = self.input_names[a]
            if name in taken:  # a parameter named like a user input
                name = f"{name}<{a.name}>"
            taken.add(name)
            if a in self.generated:  # a recipe in the graph, made by the device that reads it
                init, params = self.generated[a]
                val = a.meta["val"]
                spec = OpSpec(
                    "input", init, (), tuple(val.shape), _dtype_name(val.dtype), params=params
                )
                node_of[a] = b.add_node(name, "input", 0.0, spec.out_bytes, (), spec)
                continue
            value = self.values[a]
            if not isinstance(value, torch.Tensor):
                raise ImportModelError(
                    f"{self.input_names[a]!r} is a {type(value).__name__}, expected a tensor"
                )
            value = value.detach().contiguous()
            spec = OpSpec("input", "stored", (), tuple(value.shape), _dtype_name(value.dtype))
            node_of[a] = b.add_node(name, "input", 0.0, spec.out_bytes, (), spec)
            stored[name] = value
        counted: set[fx.Node] = set()
        for ks in sorted(groups, key=lambda ks: units[ks[-1]].pos):
            members = sorted({m for k in ks for m in units[k].nodes}, key=self.index.__getitem__)
            out = units[ks[-1]].nodes[-1]
            operands, program = self._program(members, out)
            node_flops = float(sum(flops.get(m, 0) for m in members if m not in counted))
            counted.update(members)
            val = out.meta["val"]
            in_vals = [self._val(a) for a in operands]
            path = _scope_path(units[ks[-1]].stack, depth)
            label = path or "<root>"
            if granularity == "op":
                label = op_name(units[ks[-1]].nodes[0].target)
            spec = OpSpec(
                "program",
                label,
                tuple(tuple(v.shape) for v in in_vals),
                tuple(val.shape),
                _dtype_name(val.dtype),
                flops_override=node_flops,
                in_dtypes=tuple(_dtype_name(v.dtype) for v in in_vals),
                program=program,
            )
            name = f"{path}/{out.name}" if path else out.name
            if name in taken:  # a root op named like a root parameter ("weight")
                name = f"<root>/{out.name}"
            node_of[out] = b.add_node(
                name, "program", node_flops, spec.out_bytes, [node_of[a] for a in operands], spec
            )
        graph = b.build()
        expected = self._expected(graph, node_of)
        return replace(graph, tensors=StoredTensors(stored, expected))

    def _program(self, members: list[fx.Node], out: fx.Node) -> tuple[list[fx.Node], Program]:
        """The steps computing ``out`` from ``members`` (in export order), and the nodes outside
        them that they read (the operands, in first-use order)."""
        operands: dict[fx.Node, int] = {}
        step_of = {m: i for i, m in enumerate(members)}

        def ref(a: fx.Node) -> dict[str, int]:
            if a in step_of:
                return {"step": step_of[a]}
            return {"in": operands.setdefault(a, len(operands))}

        steps = []
        for m in members:
            args = [self._encode(a, ref, m) for a in m.args]
            kwargs = {k: self._encode(v, ref, m) for k, v in m.kwargs.items()}
            steps.append((op_name(m.target), args, kwargs))
        return list(operands), Program.make(steps, step_of[out])

    def _val(self, a: fx.Node) -> torch.Tensor:
        if a in self.values and a not in self.generated:
            return self.values[a]
        return a.meta["val"]

    def _encode(self, a: Any, ref: Any, m: fx.Node) -> Any:
        """An fx argument in the program's JSON form."""
        if isinstance(a, fx.Node):
            return ref(a)
        if isinstance(a, list | tuple):
            return [self._encode(x, ref, m) for x in a]
        if a is None or isinstance(a, bool | int | str):
            return a
        if isinstance(a, float):
            if math.isfinite(a):
                return a
            return {"float": "nan" if math.isnan(a) else ("inf" if a > 0 else "-inf")}
        if isinstance(a, torch.dtype):
            name = _dtype_name(a)
            if name not in TORCH_DTYPE_NAMES:
                raise _fail(m, f"takes dtype {name}; expected one of {TORCH_DTYPE_NAMES}")
            return {"dtype": name}
        if isinstance(a, torch.device):
            return {"device": None}
        if isinstance(a, torch.layout):
            if a != torch.strided:
                raise _fail(m, f"takes layout {a}; only strided tensors are supported")
            return {"layout": "strided"}
        if isinstance(a, torch.memory_format):
            return {"memory_format": str(a).removeprefix("torch.")}
        if isinstance(a, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise _fail(m, "takes a symbolic size (dynamic shapes); export with static shapes")
        raise _fail(m, f"takes an argument of type {type(a).__name__}, which a graph cannot store")

    def _expected(self, graph: DataflowGraph, node_of: dict[fx.Node, int]) -> dict[str, Any]:
        """The model's outputs on the example inputs, by output node name (none for generated
        weights: the reference is then a run of the graph on the same weights)."""
        if self.recipes is not None:
            return {}
        if self.expected is None:
            try:
                with torch.no_grad():
                    result = self.ep.module()(*self.args, **self.kwargs)
            except Exception as exc:  # noqa: BLE001
                raise ImportModelError(
                    f"the exported program fails on its example inputs: {exception_line(exc)}"
                ) from None
            self.expected = [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
        if len(self.expected) != len(self.outputs):
            return {}  # the reference falls back to a run of the graph
        out: dict[str, Any] = {}
        for o, value in zip(self.outputs, self.expected):
            val = o.meta["val"]
            if tuple(value.shape) != tuple(val.shape) or value.dtype != val.dtype:
                return {}
            out[graph.names[node_of[o]]] = value.detach().contiguous()
        return out
