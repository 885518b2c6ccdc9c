"""The model zoo's specs, models and errors (no import through torch.export here)."""

from __future__ import annotations

import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.house.errors import ConfigError
from doppler_lab.importers.zoo import (
    IMPORT_OPTIONS,
    MODELS,
    describe_models,
    is_model_spec,
    make_model,
    split_spec,
)

USER_FILE = """
import torch

def make(hidden=8, batch=2):
    return torch.nn.Linear(hidden, 3).eval(), (torch.randn(batch, hidden),)

def not_a_pair():
    return 3
"""


def test_split_spec_separates_model_parameters_and_import_options():
    assert split_spec("hf-llama:layers=3,granularity=op,depth=2") == (
        "hf-llama",
        {"layers": 3},
        {"granularity": "op", "depth": 2},
    )
    assert split_spec("dir/my model.py:make:hidden=4,merge=false") == (
        "dir/my model.py:make",
        {"hidden": 4},
        {"merge": False},
    )
    assert split_spec("saved.pt2:granularity=op") == ("saved.pt2", {}, {"granularity": "op"})
    assert set(IMPORT_OPTIONS) == {"granularity", "depth", "merge", "weights"}


def test_is_model_spec():
    for spec in ("hf-llama", "mlp:layers=2", "x.py:f", "a/b.pt2", "resnet:blocks=1"):
        assert is_model_spec(spec)
    for spec in ("chainmm", "llama_block:heads=8", "g.json"):
        assert not is_model_spec(spec)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_are_seeded_and_in_eval_mode(name):
    small = {"hf-llama": ":layers=1,hidden=16", "hf-gpt2": ":layers=1,hidden=16"}.get(name, "")
    m1, a1 = make_model(name + small)
    m2, a2 = make_model(name + small)
    assert not m1.training and not any(m.training for m in m1.modules())
    with torch.no_grad():
        y1, y2 = m1(*a1), m2(*a2)
    assert isinstance(y1, torch.Tensor) and torch.equal(y1, y2)
    m3, a3 = make_model(name + (small + "," if small else ":") + "seed=1")
    with torch.no_grad():
        assert not torch.equal(m3(*a3), y1)


def test_making_a_model_leaves_the_global_torch_rng_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    make_model("mlp:layers=1,hidden=8")
    assert torch.equal(torch.rand(3), expected)


def test_resnet_batchnorm_is_not_the_identity():
    model, (x,) = make_model("resnet")
    bn = model.stem[1]
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
    assert tuple(model(x).shape) == (2, 10)


def test_user_file_function(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(USER_FILE)
    model, args = make_model(f"{path}:make:hidden=4,batch=3")
    assert tuple(model(*args).shape) == (3, 3)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope", "unknown model 'nope'; expected a zoo model"),
        ("mlp:width=3", "model 'mlp' has no parameter 'width'"),
        ("mlp:layers=0", r"model 'mlp': parameter layers=0; expected an integer >= 1"),
        ("mlp:layers=1e8", r"parameter layers=100000000; expected an integer >= 1 and <= 1024"),
        ("mlp:layers=1.5", "expected an integer"),
        ("hf-llama:hidden=60,heads=8", "heads=8 does not divide hidden=60"),
        ("hf-llama:heads=4,kv_heads=3", "kv_heads=3 does not divide heads=4"),
        ("mlp:layers", "is not of the form key=value"),
        ("missing.py:make", "model file 'missing.py' does not exist"),
    ],
)
def test_bad_specs_are_one_line_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message) as info:
        make_model(spec)
    assert "\n" not in str(info.value)


def test_bad_user_functions(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(USER_FILE)
    with pytest.raises(ConfigError, match="has no function 'absent'"):
        make_model(f"{path}:absent")
    with pytest.raises(ConfigError, match=r"returned int; expected \(model, example_args\)"):
        make_model(f"{path}:not_a_pair")
    with pytest.raises(ConfigError, match="unexpected keyword argument 'depthx'"):
        make_model(f"{path}:make:depthx=1")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no\\nway')\n")
    with pytest.raises(ConfigError, match="failed to load: RuntimeError: no way"):
        make_model(f"{broken}:make")


def test_cli_bad_model_spec_exits_2_with_one_line(capsys):
    assert main(["import", "mlp:layers=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "parameter layers=0" in err


def test_workloads_list_shows_the_zoo(capsys):
    assert main(["workloads", "list"]) == 0
    out = capsys.readouterr().out
    for name in (*MODELS, "FILE.py:FUNC"):
        assert name in out
    assert [m["name"] for m in describe_models()] == list(MODELS)
