"""A labelled task a classifier learns in seconds, for accuracy tests (tests/test_accuracy.py): images whose class is
their dominant colour (red, green or blue) under shapes and noise that make some of them hard, a small convnet
trained on one seeded set and evaluated on another, and the in-process evaluation the served figures must match."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn

from serving.workloads.image.preprocessing import Preprocessing, decode_and_preprocess

SIZE = 64
CLASSES = 3
PREPROCESSING = Preprocessing(height=SIZE, width=SIZE)  # ImageNet's mean and std, resize to 73, crop 64
MODEL = ["model=examples/torchscript", "model.name=colours", f"model.input_shape=[3,{SIZE},{SIZE}]",
         f"model.num_classes={CLASSES}", "model.max_batch_size=8"]


def colour_image(rng: np.random.Generator, label: int) -> bytes:
    """A JPEG of class `label`: a background leaning to that channel (by a margin that varies: some are close
    calls), with shapes of random colours over it."""
    width, height = (int(v) for v in rng.integers(48, 200, 2))
    base = rng.uniform(40, 140, 3)
    base[label] += rng.uniform(5, 80)
    image = Image.new("RGB", (width, height), tuple(int(v) for v in base))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(0, 3))):  # small shapes: they blur the colour, never hide it
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = x0 + int(rng.integers(4, width // 3 + 5)), y0 + int(rng.integers(4, height // 3 + 5))
        draw.rectangle((x0, y0, x1, y1), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    noisy = np.clip(np.asarray(image, dtype=np.float32) + rng.normal(0, 12, (height, width, 3)), 0, 255)
    buffer = io.BytesIO()
    Image.fromarray(noisy.astype(np.uint8)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def dataset(count: int, seed: int) -> tuple[list[bytes], np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, count)
    return [colour_image(rng, int(label)) for label in labels], labels


class ColourNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4, padding=2), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def train(seconds_budget_steps: int = 300) -> nn.Module:
    """The convnet trained on 600 seeded images (a few seconds on a CPU)."""
    torch.manual_seed(0)
    images, labels = dataset(600, seed=1)
    x = torch.from_numpy(decode_and_preprocess(images, PREPROCESSING))
    y = torch.from_numpy(labels).long()
    net = ColourNet()
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-2)
    for step in range(seconds_budget_steps):
        batch = torch.randint(0, len(x), (64,), generator=torch.Generator().manual_seed(step))
        optimiser.zero_grad()
        nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
        optimiser.step()
    return net.eval()


def labelled_folder(folder: Path, count: int = 90, seed: int = 2) -> tuple[Path, Path, np.ndarray]:
    """`count` held-out images as JPEG files and their labels CSV; returns both paths and the labels."""
    images, labels = dataset(count, seed)
    folder.mkdir(parents=True, exist_ok=True)
    for index, data in enumerate(images):
        (folder / f"img{index:03d}.jpg").write_bytes(data)
    csv = folder.parent / "labels.csv"
    csv.write_text("file,class\n" + "".join(f"img{i:03d}.jpg,{int(label)}\n" for i, label in enumerate(labels)))
    return folder, csv, labels


def in_process_top1(net: nn.Module, folder: Path, labels: np.ndarray) -> float:
    """The model's top-1 on the folder's files, evaluated here: what every served FP32 path must reproduce."""
    files = sorted(folder.glob("*.jpg"))
    with torch.no_grad():
        logits = net(torch.from_numpy(decode_and_preprocess([f.read_bytes() for f in files], PREPROCESSING)))
    return float((logits.argmax(1).numpy() == labels).mean())


def torchscript(net: nn.Module, path: Path) -> Path:
    torch.jit.trace(net, torch.randn(2, 3, SIZE, SIZE)).save(str(path))
    return path
