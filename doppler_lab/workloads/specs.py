"""The one grammar of graph and cluster specs: what every command, the general policy's task
distribution, the notebooks and the benches accept for a graph or a cluster.

A GRAPH spec is one of (the first rule that matches wins)::

    paper:NAME                   a released paper graph, installed (``doppler-lab data paper-graphs``)
    model:SPEC                   SPEC must be a model (one of the next three forms)
    paper_costs:SPEC             the graph of SPEC with the paper's cost convention
    FILE.py:FUNC[:k=v,...]       a function in your file returning (model, example_args)
    FILE.pt2[:k=v,...]           a saved ExportedProgram (loaded only with --trust-pt2)
    FILE.json                    a graph document (``place --out``, ``workloads build --out``)
    FILE.txt                     a graph file in the paper's text format
    WORKLOAD[:k=v,...]           a generator: chainmm, ffnn, llama_block, ...
    MODEL[:k=v,...]              a zoo model: hf-llama, hf-gpt2, mlp, resnet
    NAME                         a released paper graph by its name (= paper:NAME)

Parameters are ``key=value`` items read by :mod:`doppler_lab.house.settings`; a model's may
include the import options ``granularity``, ``depth`` and ``merge``. A CLUSTER spec is a preset
(``p100x4``, ``v100x8``, ``h100x8``, ``cpu``, ``uniform``), ``cpu:N`` / ``uniform:N``,
``multihost[:hosts=H,devices=D,...]`` or a cluster / calibration profile ``.json`` file.

:func:`parse_graph_spec` reads a spec into a :class:`GraphSpec` (kind, target, parameters)
without building anything; :func:`graph_from_spec` builds its graph; :func:`cluster_from_spec`
makes a cluster. A bad spec is a one-line :class:`~doppler_lab.house.errors.ConfigError` (or
:class:`~doppler_lab.house.errors.ClusterError`) naming the bad item and what was expected.

Example:
    >>> spec = parse_graph_spec("llama_block:blocks=2,scale=0.1")
    >>> spec.kind, spec.target, dict(spec.params)
    ('workload', 'llama_block', {'blocks': 2, 'scale': 0.1})
    >>> str(spec.with_params(scale=0.05))
    'llama_block:blocks=2,scale=0.05'
    >>> parse_graph_spec("model:hf-llama:layers=2").kind
    'model'
    >>> cluster_from_spec("uniform:6").num_devices
    6
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..house.errors import ClusterError, ConfigError
from ..house.settings import split_specs
from ..house.userfiles import file_or_folder

if TYPE_CHECKING:  # pragma: no cover
    from ..hardware.cluster import Cluster
    from ..ir.graph import DataflowGraph

__all__ = [
    "CLUSTER_FORMS",
    "GRAPH_FORMS",
    "GRAPH_KINDS",
    "MODEL_KINDS",
    "PAPER_COST_RATIO",
    "GraphSpec",
    "cluster_from_spec",
    "graph_from_spec",
    "paper_cost_graph",
    "parse_graph_spec",
]

#: what a graph spec can name, in words (the keys are :attr:`GraphSpec.kind`)
GRAPH_KINDS: Mapping[str, str] = MappingProxyType(
    {
        "workload": "a workload",
        "model": "a zoo model",
        "function": "a model function FILE.py:FUNC",
        "program": "a saved program FILE.pt2",
        "json": "a JSON graph",
        "paper_file": "a paper graph file",
        "paper": "a released paper graph",
        "paper_costs": "a graph with the paper's costs",
    }
)
#: the kinds imported through torch.export (what ``model:SPEC`` and ``doppler-lab import`` take)
MODEL_KINDS: tuple[str, ...] = ("model", "function", "program")
#: the forms of a graph spec, for messages
GRAPH_FORMS = (
    "a workload NAME[:k=v,...], a zoo model NAME[:k=v,...], FILE.py:FUNC[:k=v,...], FILE.pt2, "
    "FILE.json, a paper FILE.txt, paper:NAME, model:SPEC or paper_costs:SPEC"
)
#: the forms of a cluster spec, for messages
CLUSTER_FORMS = (
    "a preset (p100x4, v100x8, h100x8, cpu, uniform), cpu:N or uniform:N (N >= 1), "
    "multihost[:hosts=H,devices=D,...] or a cluster/profile .json file"
)
#: each op's output moves between devices in this many times its compute time (the paper's six
#: graphs: 4.0 for every op); the default of ``paper_costs:SPEC``
PAPER_COST_RATIO = 4.0

_PREFIXES = ("paper", "model", "paper_costs")
_PAPER_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_FUNCTION = re.compile(r"^(?P<head>.+?\.py:[A-Za-z_][A-Za-z0-9_]*)(?::(?P<params>.*))?$")
_PROGRAM = re.compile(r"^(?P<head>.+?\.pt2)(?::(?P<params>.*))?$")
_SIZED = re.compile(r"^(?P<name>[A-Za-z0-9_]+):(?P<count>.*)$")


@dataclass(frozen=True, eq=True)
class GraphSpec:
    """A parsed graph spec (build its graph with :func:`graph_from_spec` or :meth:`build`).

    Attributes:
        kind: one of :data:`GRAPH_KINDS`.
        target: the workload or zoo model name, ``FILE.py:FUNC``, the file's path, the paper
            graph's name; for ``paper_costs`` the inner spec's text.
        params: the ``key=value`` parameters (a model's include its import options).
        text: the spec as written (stripped); ``str(spec)`` gives it back.
        inner: the spec that ``paper_costs:SPEC`` re-costs (else None).
        prefix: ``model`` for ``model:SPEC`` (else empty).
    """

    kind: str
    target: str
    params: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""
    inner: GraphSpec | None = None
    prefix: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    def __hash__(self) -> int:
        return hash((self.kind, self.text))

    def __str__(self) -> str:
        return self.text

    @property
    def body(self) -> str:
        """The text without a ``model:`` prefix (what an imported graph is named after)."""
        return self.text.partition(":")[2].strip() if self.prefix else self.text

    @property
    def is_model(self) -> bool:
        return self.kind in MODEL_KINDS

    def with_params(self, **params: Any) -> GraphSpec:
        """This spec with ``params`` set: items with those keys are dropped and the new ones
        appended (``str`` values as written, others with ``str``; booleans ``true``/``false``).

        Raises:
            ConfigError: a spec that takes no parameters (a file, a paper graph).
        """
        if self.kind == "paper_costs":
            assert self.inner is not None
            return parse_graph_spec(f"paper_costs:{self.inner.with_params(**params)}")
        if self.kind not in ("workload", *MODEL_KINDS):
            raise ConfigError(
                f"graph spec {self.text!r} is {GRAPH_KINDS[self.kind]}, which takes no "
                "parameters; expected a workload or a model spec"
            )
        if not params:
            return self
        head, rest = _head_and_params(self)
        keys = set(params)
        items = [i for i in (s.strip() for s in rest.split(",")) if i]
        items = [i for i in items if i.partition("=")[0].strip().replace("-", "_") not in keys]
        items += [f"{k}={_value_text(v)}" for k, v in params.items()]
        text = f"{head}:{','.join(items)}"
        return parse_graph_spec(f"{self.prefix}:{text}" if self.prefix else text)

    def check_files(self, paper_dir: str | Path | None = None) -> GraphSpec:
        """This spec if the files it names are there (a graph file, a model file, a saved
        program, an installed paper graph), without reading them: for a command that hands
        the spec on (``explore`` writes it into a notebook) instead of building it.

        Raises:
            ConfigError: the first missing (or special) file, named as :func:`graph_from_spec`
                names it.
        """
        from ..house.userfiles import input_file

        if self.kind == "paper_costs":
            assert self.inner is not None
            self.inner.check_files(paper_dir)
        elif self.kind in ("json", "paper_file"):
            input_file(self.target, "graph file")
        elif self.kind == "function":
            input_file(self.target.rpartition(":")[0], "model file")
        elif self.kind == "program":
            input_file(self.target, "saved program", limit="MAX_TENSOR_FILE_BYTES")
        elif self.kind == "paper":
            from ..house.paths import paper_graph_path

            paper_graph_path(self.target, paper_dir)
        return self

    def build(self, **kwargs: Any) -> DataflowGraph:
        """:func:`graph_from_spec` of this spec."""
        return graph_from_spec(self, **kwargs)


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _head_and_params(spec: GraphSpec) -> tuple[str, str]:
    """``("chainmm", "scale=0.1")`` for ``chainmm:scale=0.1``; the head of ``FILE.py:FUNC`` or
    ``FILE.pt2`` keeps its colon."""
    body = spec.body
    m = _FUNCTION.match(body) if spec.kind == "function" else None
    m = _PROGRAM.match(body) if spec.kind == "program" else m
    if m:
        return m["head"], m["params"] or ""
    head, _, rest = body.partition(":")
    return head.strip(), rest


# -- parsing ------------------------------------------------------------------------------------
def _released_paper_names() -> tuple[str, ...]:
    from ..io.datasets import PAPER_GRAPH_SHA256

    return tuple(Path(n).stem for n in PAPER_GRAPH_SHA256)


def _unknown_name(name: str, text: str, kinds: Sequence[str] | None = None) -> ConfigError:
    from ..importers.zoo import MODELS
    from . import WORKLOADS

    owner = f"graph spec {text!r}: " if text != name else ""
    if kinds is not None and tuple(kinds) == ("workload",):
        return ConfigError(
            f"{owner}unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}"
        )
    if kinds is not None and set(kinds) <= set(MODEL_KINDS):
        return ConfigError(
            f"{owner}unknown model {name!r}; expected a zoo model ({', '.join(MODELS)}), "
            "FILE.py:FUNC or a saved program FILE.pt2"
        )
    return ConfigError(
        f"{owner}unknown workload {name!r}; expected a workload ({', '.join(WORKLOADS)}), a zoo "
        f"model ({', '.join(MODELS)}), a released paper graph "
        f"({', '.join(_released_paper_names())}), FILE.py:FUNC, FILE.pt2, FILE.json, a paper "
        "FILE.txt, paper:NAME, model:SPEC or paper_costs:SPEC"
    )


def _expected(kinds: Sequence[str]) -> str:
    words = [GRAPH_KINDS[k] for k in kinds]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def parse_graph_spec(text: str, kinds: Sequence[str] | None = None) -> GraphSpec:
    """Read a graph spec (see the module docstring) without building anything; files are not
    opened (a missing file is reported by :func:`graph_from_spec`).

    Args:
        text: the spec.
        kinds: the kinds accepted (default: every one of :data:`GRAPH_KINDS`).

    Raises:
        ConfigError: an empty spec, an unknown name, a malformed ``key=value`` item, a key given
            twice, a kind not in ``kinds``; one line naming the bad item and what was expected.
    """
    spec = _parse(text, kinds)
    if kinds is not None and spec.kind not in kinds:
        raise ConfigError(
            f"graph spec {spec.text!r} is {GRAPH_KINDS[spec.kind]}; expected {_expected(kinds)}"
        )
    return spec


def split_graph_specs(text: str) -> list[str]:
    """A comma-separated list of graph specs, whose own parameters are comma-separated too:
    ``"chainmm:matrices=3,scale=0.01,ffnn"`` is ``["chainmm:matrices=3,scale=0.01", "ffnn"]``
    (:func:`~doppler_lab.house.settings.split_specs`; empty items left out).

    Raises:
        ConfigError: a parameter with no spec before it.
    """
    return split_specs(text, "graph specs")


#: how deep ``model:`` and ``paper_costs:`` may nest (``paper_costs:model:hf-llama`` is 2)
MAX_SPEC_NESTING = 8


def _parse(text: str, kinds: Sequence[str] | None = None, depth: int = 0) -> GraphSpec:
    from ..house.settings import parse_spec

    if depth > MAX_SPEC_NESTING:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise ConfigError(
            f"graph spec {shown!r} is nested more than {MAX_SPEC_NESTING} deep (model:, "
            f"paper_costs:); expected at most {MAX_SPEC_NESTING} prefixes"
        )

    if not isinstance(text, str):
        raise ConfigError(f"graph spec {text!r} is not text; expected {GRAPH_FORMS}")
    s = text.strip()
    if not s:
        raise ConfigError(f"graph spec {text!r} is empty; expected {GRAPH_FORMS}")
    head, colon, rest = s.partition(":")
    prefix = head.strip()
    if colon and prefix in _PREFIXES:
        rest = rest.strip()
        if prefix == "paper":
            if not _PAPER_NAME.match(rest):
                raise ConfigError(
                    f"graph spec {s!r}: paper graph name {rest!r}; expected paper:NAME with NAME "
                    f"the stem of a .txt file in the paper graph folder "
                    f"({', '.join(_released_paper_names())})"
                )
            return GraphSpec("paper", rest, {}, s)
        if prefix == "model":
            if not rest:
                raise ConfigError(f"graph spec {s!r} names no model; expected model:SPEC")
            inner = _parse(rest, MODEL_KINDS, depth + 1)
            if not inner.is_model:
                raise ConfigError(
                    f"graph spec {s!r}: {rest!r} is {GRAPH_KINDS[inner.kind]}; expected "
                    f"model:SPEC with SPEC {_expected(MODEL_KINDS)}"
                )
            return GraphSpec(inner.kind, inner.target, inner.params, s, prefix="model")
        if not rest:
            raise ConfigError(f"graph spec {s!r} names no graph; expected paper_costs:SPEC")
        inner = _parse(rest, None, depth + 1)
        return GraphSpec("paper_costs", inner.text, {}, s, inner=inner)
    owner = f"model spec {s!r}"
    m = _FUNCTION.match(s)
    if m:
        _, params = parse_spec(f"file:{m['params'] or ''}", owner, "parameter")
        return GraphSpec("function", m["head"], params, s)
    m = _PROGRAM.match(s)
    if m:
        from ..importers.zoo import IMPORT_OPTIONS

        _, params = parse_spec(f"file:{m['params'] or ''}", owner, "parameter")
        extra = [k for k in params if k not in IMPORT_OPTIONS]
        if extra:
            raise ConfigError(
                f"{owner}: a saved program takes only the import options "
                f"({', '.join(IMPORT_OPTIONS)}), got {', '.join(extra)}"
            )
        return GraphSpec("program", m["head"], params, s)
    suffix = Path(s).suffix
    if suffix == ".json":
        return GraphSpec("json", s, {}, s)
    if suffix == ".txt":
        return GraphSpec("paper_file", s, {}, s)
    from ..importers.zoo import MODELS
    from . import WORKLOADS
    from . import parse_spec as parse_workload_spec

    name = head.strip()
    if name in WORKLOADS:
        return GraphSpec("workload", *parse_workload_spec(s), s)
    if name in MODELS:  # the owner of doppler_lab.importers.zoo.split_spec's messages
        return GraphSpec("model", *parse_spec(s, f"model spec {s!r}", "parameter"), s)
    if not colon and name in _released_paper_names():
        return GraphSpec("paper", name, {}, s)
    if os.path.lexists(s):  # a file the user meant (G.JSON, graph.js): not "unknown workload"
        raise ConfigError(
            f"graph spec {s!r} is {file_or_folder(s)} whose name ends in neither .json nor "
            ".txt; expected a "
            "JSON graph FILE.json, a paper graph FILE.txt, FILE.py:FUNC or FILE.pt2"
        )
    raise _unknown_name(name, s, kinds)


# -- building -----------------------------------------------------------------------------------
def graph_from_spec(
    spec: str | GraphSpec,
    *,
    paper_dir: str | Path | None = None,
    trust: bool | None = None,
    **import_options: Any,
) -> DataflowGraph:
    """The graph of a graph spec: the same graph for the same spec, whichever caller asks.

    Args:
        spec: the spec's text or a parsed :class:`GraphSpec`.
        paper_dir: the folder of the paper's released graphs for ``paper:NAME`` (default:
            :func:`doppler_lab.house.paths.paper_graphs_dir`'s search).
        trust: load a ``.pt2`` (True), refuse it (False) or leave it to ``--trust-pt2`` /
            ``$DOPPLER_LAB_TRUST_PT2`` (None; :mod:`doppler_lab.house.trust`).
        **import_options: ``granularity``, ``depth``, ``merge`` for a model (None: not given).

    Raises:
        ConfigError: a bad spec (:func:`parse_graph_spec`), a missing file or paper graph, a bad
            parameter value, import options for a graph that is not a model.
        ImportModelError: a model the importer cannot take, an untrusted ``.pt2``.
    """
    from ..house.trust import trust_pt2

    s = spec if isinstance(spec, GraphSpec) else parse_graph_spec(spec)
    given = {k: v for k, v in import_options.items() if v is not None}
    if given and not s.is_model:
        raise ConfigError(
            f"graph spec {s.text!r} is {GRAPH_KINDS[s.kind]}: the import options "
            f"({', '.join(given)}) apply only to {_expected(MODEL_KINDS)}"
        )
    if s.kind == "workload":
        from . import build

        return build(s.target, **s.params)
    if s.is_model:
        from ..importers.zoo import import_model

        with trust_pt2(trust):
            return import_model(s.body, **import_options)
    if s.kind in ("json", "paper_file"):
        from ..house.userfiles import input_file
        from ..io.documents import load_graph

        return load_graph(input_file(s.target, "graph file"))
    if s.kind == "paper":
        from ..house.paths import paper_graph_path
        from ..io.documents import read_paper_graph

        return read_paper_graph(paper_graph_path(s.target, paper_dir))
    assert s.kind == "paper_costs" and s.inner is not None
    return paper_cost_graph(graph_from_spec(s.inner, paper_dir=paper_dir, trust=trust))


def paper_cost_graph(graph: DataflowGraph, ratio: float = PAPER_COST_RATIO) -> DataflowGraph:
    """``graph`` with the paper's cost convention as explicit costs: each op computes in its time
    on one P100 (the ``p100x4`` preset) and its output moves to another device in ``ratio``
    times that (inputs: nothing; they are resident everywhere). ``paper_costs:SPEC``."""
    import numpy as np

    from ..hardware.cluster import make_cluster
    from ..timing.cost_model import CostModel

    compute = np.where(graph.is_input, 0.0, CostModel(graph, make_cluster("p100x4")).mean_compute)
    edge = ratio * compute[graph.edge_src]
    return graph.with_costs(compute, edge)


# -- clusters -----------------------------------------------------------------------------------
def cluster_from_spec(spec: str | Cluster, devices: int | None = None) -> Cluster:
    """A cluster from a cluster spec (see the module docstring) or a :class:`Cluster` (returned
    as is). ``devices`` sizes ``cpu`` and ``uniform`` (default 4) and must match a fixed size
    when given; a ``.json`` file's cluster is taken as it is.

    Raises:
        ClusterError: an unknown preset, a bad ``NAME:N``, a size that does not match,
            a missing file; one line naming the spec and what was expected.
    """
    from ..hardware.cluster import PRESETS, Cluster, make_cluster
    from ..house.validate import parse_int_text

    if isinstance(spec, Cluster):
        if devices is not None and devices != spec.num_devices:
            raise ClusterError(
                f"cluster {spec.name!r} has {spec.num_devices} devices, not {devices}"
            )
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ClusterError(f"cluster {spec!r}; expected {CLUSTER_FORMS}")
    s = spec.strip()
    if s.endswith(".json"):
        from ..house.userfiles import input_file
        from ..io.documents import load_cluster  # a cluster JSON or a calibration profile

        return load_cluster(input_file(s, "cluster file", ClusterError))
    if s == "multihost" or s.startswith("multihost:"):
        return make_cluster(s, devices)
    sized = _SIZED.match(s)
    if sized:
        name, count = sized["name"], sized["count"].strip()
        if name not in ("cpu", "uniform"):
            what = f"preset {name!r} has a fixed size" if name in PRESETS else f"no preset {name!r}"
            raise ClusterError(f"cluster {s!r}: {what}; expected {CLUSTER_FORMS}")
        number = parse_int_text(count) if count.isascii() and count.isdigit() else None
        if number is None or number < 1:  # parse_int_text: no int() of 5,000 digits
            shown = count if len(count) <= 60 else count[:57] + "..."
            raise ClusterError(
                f"cluster {s if len(s) <= 80 else s[:77] + '...'!r}: device count {shown!r}; "
                f"expected {name}:N with N an integer >= 1"
            )
        if devices is not None and devices != number:
            raise ClusterError(f"cluster {s!r} has {number} devices, not {devices}")
        return make_cluster(name, number)
    if s not in PRESETS:
        if os.path.lexists(s):  # c.JSON, a folder: said as a file, not as an unknown preset
            raise ClusterError(
                f"cluster {s!r} is {file_or_folder(s)} whose name does not end in .json; "
                "expected a cluster or calibration profile FILE.json, or a preset"
            )
        raise ClusterError(f"unknown cluster {s!r}; expected {CLUSTER_FORMS}")
    return make_cluster(s, devices)
