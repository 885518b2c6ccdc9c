"""Small PyTorch models written in the repo for the model zoo: an MLP and a ResNet.

Both are plain :class:`torch.nn.Module` trees, so the importer's module scopes
(``layers.0``, ``stages.1.0.conv2``, ...) name their parts.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """``layers`` Linear + GELU blocks of width ``hidden``, then a Linear head to ``classes``.

    Shapes:
        input ``(batch, hidden)`` -> output ``(batch, classes)``.
    """

    def __init__(self, layers: int, hidden: int, classes: int):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, hidden), nn.GELU()) for _ in range(layers)
        )
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm, and a 1x1 projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    """A small ResNet: a 3x3 stem, ``stages`` stages of ``blocks`` residual blocks (channels
    doubling and resolution halving from one stage to the next), global pooling, a Linear head.

    Shapes:
        input ``(batch, 3, image, image)`` -> output ``(batch, classes)``.
    """

    def __init__(self, stages: int, blocks: int, channels: int, classes: int):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
        )
        layers = []
        cin = channels
        for s in range(stages):
            cout = channels * 2**s
            layers.append(
                nn.Sequential(
                    *(
                        ResidualBlock(cin if b == 0 else cout, cout, 2 if s > 0 and b == 0 else 1)
                        for b in range(blocks)
                    )
                )
            )
            cin = cout
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def randomise_batchnorm(model: nn.Module, generator: torch.Generator) -> None:
    """Give every BatchNorm random running statistics and affine parameters, so that in eval
    mode it is not the identity (a check against the eager model then tests it)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
                m.running_var.copy_(0.5 + torch.rand(n, generator=generator))
                m.weight.copy_(0.5 + torch.rand(n, generator=generator))
                m.bias.copy_(0.1 * torch.randn(n, generator=generator))


class CausalLMLogits(nn.Module):
    """A Hugging Face causal language model that returns only its logits (one tensor), with
    the key/value cache off.

    Shapes:
        input ids ``(batch, seq)`` int64 -> logits ``(batch, seq, vocab)``.
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits
