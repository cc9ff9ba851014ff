"""The pooling layers of standard CNNs, as torchvision builds them, at their usual input sizes.

One :class:`Layer` per distinct pooling call of a model's training step; ``count`` says how many times the step
runs that exact call (GoogLeNet's inception-5a and 5b branch poolings, Inception-v3's four Mixed_6 branch
poolings).  The table is data shared by ``bench/models.py`` and anything else that wants real layer shapes:

    import sys; sys.path.insert(0, "bench")
    from cnn_layers import LAYERS, MODELS, layers_of
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Layer:
    """One pooling layer: ``op`` is ``"max"`` (``nn.MaxPool2d``), ``"avg"`` (``nn.AvgPool2d`` /
    ``F.avg_pool2d``, ``count_include_pad=True``) or ``"adaptive_max"`` (``nn.AdaptiveMaxPool2d``); the input
    is (C, H, W) per image."""

    model: str
    name: str
    op: str
    c: int
    h: int
    w: int
    kernel: int = 0
    stride: int = 0
    padding: int = 0
    ceil_mode: bool = False
    output_size: tuple[int, int] | None = None
    count: int = 1

    @property
    def key(self) -> str:
        """``model/name``, unique in :data:`LAYERS`."""
        return f"{self.model}/{self.name}"

    def out_hw(self) -> tuple[int, int]:
        """Output height and width by PyTorch's rule (a ceil-mode window must start inside the input or the
        left padding)."""
        if self.op == "adaptive_max":
            assert self.output_size is not None
            return self.output_size

        def size(n: int) -> int:
            span = n + 2 * self.padding - self.kernel
            o = (math.ceil(span / self.stride) if self.ceil_mode else span // self.stride) + 1
            if self.ceil_mode and (o - 1) * self.stride >= n + self.padding:
                o -= 1
            return o
        return size(self.h), size(self.w)

    def describe(self) -> str:
        """A short text of the geometry: ``64x112x112 k3s2p1 ceil`` or ``512x14x14 -> 7x7``."""
        hw = f"{self.c}x{self.h}x{self.w}"
        if self.op == "adaptive_max":
            return f"{hw} -> {self.out_hw()[0]}x{self.out_hw()[1]}"
        return f"{hw} k{self.kernel}s{self.stride}p{self.padding}{' ceil' if self.ceil_mode else ''}"


def _max(model: str, name: str, c: int, hw: int, k: int, s: int, p: int = 0, ceil: bool = False,
         count: int = 1) -> Layer:
    return Layer(model, name, "max", c, hw, hw, k, s, p, ceil, count=count)


def _avg(model: str, name: str, c: int, hw: int, k: int, s: int, p: int = 0, count: int = 1) -> Layer:
    return Layer(model, name, "avg", c, hw, hw, k, s, p, count=count)


LAYERS: list[Layer] = [
    # VGG-16 (224): the five MaxPool2d(2, 2) of `features`
    *(_max("vgg16", f"pool{i + 1}", c, hw, 2, 2) for i, (c, hw) in
      enumerate([(64, 224), (128, 112), (256, 56), (512, 28), (512, 14)])),
    # ResNet-50 (224): the stem's MaxPool2d(3, 2, 1)
    _max("resnet50", "maxpool", 64, 112, 3, 2, 1),
    # AlexNet (224): MaxPool2d(3, 2) after conv1, conv2 and conv5
    _max("alexnet", "pool1", 64, 55, 3, 2),
    _max("alexnet", "pool2", 192, 27, 3, 2),
    _max("alexnet", "pool5", 256, 13, 3, 2),
    # GoogLeNet (224): stem and between-stage MaxPool2d(3, 2, ceil_mode=True) / (2, 2, ceil_mode=True), and
    # the inception blocks' branch-4 MaxPool2d(3, 1, 1, ceil_mode=True)
    _max("googlenet", "maxpool1", 64, 112, 3, 2, ceil=True),
    _max("googlenet", "maxpool2", 192, 56, 3, 2, ceil=True),
    _max("googlenet", "inception3a.branch4", 192, 28, 3, 1, 1, ceil=True),
    _max("googlenet", "inception3b.branch4", 256, 28, 3, 1, 1, ceil=True),
    _max("googlenet", "maxpool3", 480, 28, 3, 2, ceil=True),
    _max("googlenet", "inception4a.branch4", 480, 14, 3, 1, 1, ceil=True),
    # 4b, 4c and 4d all pool 512x14x14: one call shape run three times
    _max("googlenet", "inception4b-d.branch4", 512, 14, 3, 1, 1, ceil=True, count=3),
    _max("googlenet", "inception4e.branch4", 528, 14, 3, 1, 1, ceil=True),
    _max("googlenet", "maxpool4", 832, 14, 2, 2, ceil=True),
    _max("googlenet", "inception5a-b.branch4", 832, 7, 3, 1, 1, ceil=True, count=2),
    # Inception-v3 (299): stem MaxPool2d(3, 2), the Mixed blocks' F.avg_pool2d(3, 1, 1) branches and the
    # reduction blocks' F.max_pool2d(3, 2)
    _max("inception_v3", "maxpool1", 64, 147, 3, 2),
    _max("inception_v3", "maxpool2", 192, 71, 3, 2),
    _avg("inception_v3", "Mixed_5b.branch_pool", 192, 35, 3, 1, 1),
    _avg("inception_v3", "Mixed_5c.branch_pool", 256, 35, 3, 1, 1),
    _avg("inception_v3", "Mixed_5d.branch_pool", 288, 35, 3, 1, 1),
    _max("inception_v3", "Mixed_6a.branch_pool", 288, 35, 3, 2),
    _avg("inception_v3", "Mixed_6b-e.branch_pool", 768, 17, 3, 1, 1, count=4),
    _max("inception_v3", "Mixed_7a.branch_pool", 768, 17, 3, 2),
    _avg("inception_v3", "Mixed_7b.branch_pool", 1280, 8, 3, 1, 1),
    _avg("inception_v3", "Mixed_7c.branch_pool", 2048, 8, 3, 1, 1),
    # DenseNet-121 (224): the stem's MaxPool2d(3, 2, 1) and the transitions' AvgPool2d(2, 2)
    _max("densenet121", "pool0", 64, 112, 3, 2, 1),
    _avg("densenet121", "transition1.pool", 128, 56, 2, 2),
    _avg("densenet121", "transition2.pool", 256, 28, 2, 2),
    _avg("densenet121", "transition3.pool", 512, 14, 2, 2),
    # SqueezeNet-1.1 (224): MaxPool2d(3, 2, ceil_mode=True) after conv1, fire3 and fire5
    _max("squeezenet1_1", "pool1", 64, 111, 3, 2, ceil=True),
    _max("squeezenet1_1", "pool2", 128, 55, 3, 2, ceil=True),
    _max("squeezenet1_1", "pool3", 256, 27, 3, 2, ceil=True),
    # an adaptive-max classification head on VGG-16's last feature map
    Layer("adaptive_head", "adaptive_max", "adaptive_max", 512, 14, 14, output_size=(7, 7)),
]

#: the models in table order
MODELS: list[str] = list(dict.fromkeys(layer.model for layer in LAYERS))


def layers_of(models: list[str] | None = None) -> list[Layer]:
    """The layers of these models (all when None), in table order; an unknown model name is an error."""
    if models is None:
        return list(LAYERS)
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; expected some of {MODELS}")
    return [layer for layer in LAYERS if layer.model in models]
