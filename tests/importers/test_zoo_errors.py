"""Bad models through ``doppler-lab import FILE.py:FUNC``: exit 2 and one line naming the op,
its module and what is wrong; nothing is written."""

from __future__ import annotations

import re

import pytest

from doppler_lab.cli import main

BAD_MODELS = """
import torch
from torch import nn


class Nonzero(nn.Module):
    def forward(self, x):
        return x[x > 0] * 2  # data-dependent output shape


class Dropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return nn.functional.dropout(self.lin(x), 0.5, training=True)


class Noise(nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count.add_(1)
        return x * self.count


class Mutates(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


class Pair(nn.Module):
    def forward(self, x):
        return x * 2, "done"


class Same(nn.Module):
    def forward(self, x):
        return x




def symbolic():
    return Nonzero().eval(), (torch.randn(8),)

def dropout():
    return Dropout().eval(), (torch.randn(2, 4),)

def random_op():
    return Noise().eval(), (torch.randn(2, 4),)

def buffer_mutation():
    return Counter().eval(), (torch.randn(2, 4),)

def inplace_input():
    return Mutates().eval(), (torch.randn(2, 4),)

def non_tensor_output():
    return Pair().eval(), (torch.randn(2, 4),)

def input_as_output():
    return Same().eval(), (torch.randn(2, 4),)
"""

#: (function, what the line must say: the op and its module, or the output, and the fault)
CASES = [
    ("symbolic", r"aten\.index\.Tensor .*\(Nonzero\).*dynamic shape"),
    ("dropout", r"aten\.native_dropout\.default .*random op"),
    ("random_op", r"aten\.rand_like\.default .*random op"),
    ("buffer_mutation", r"\(Counter\).*buffer 'count'"),
    ("inplace_input", r"\(Mutates\).*input 'x'.*in place"),
    ("non_tensor_output", r"output 1 .*not a tensor"),
    ("input_as_output", r"output 0 \(x\).*computed from the inputs"),
]


@pytest.fixture(scope="module")
def bad_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "bad_models.py"
    path.write_text(BAD_MODELS)
    return path


@pytest.mark.parametrize("func, message", CASES, ids=[c[0] for c in CASES])
def test_bad_model_exits_2_with_one_line(func, message, bad_file, tmp_path, capsys):
    out = tmp_path / "model.json"
    assert main(["import", f"{bad_file}:{func}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("doppler-lab import: error:")]
    assert len(lines) == 1, err
    assert re.search(message, lines[0]), lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing half-written
