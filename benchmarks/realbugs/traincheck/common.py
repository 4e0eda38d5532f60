"""What the TrainCheck recipes share: data that needs no download and the tests' budget cap.

The upstream reproductions train on MNIST, CIFAR-10 or CIFAR-100, or fine-tune a downloaded model; the recipes
here keep each program's model design, loss, optimizer and loop and swap the data for scikit-learn's digits
(1797 grey 8x8 images, 10 classes) or the standard library's own source text (benchmarks/working/common.py).
Nothing here is drawn at import: the runner reloads only the modules of a recipe's own folder for each seed.
"""

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from benchmarks.working.common import epochs  # noqa: F401 - the tests' cap (WORKING_EPOCH_CAP), as for working programs

N_TRAIN = 1437  # the first 1437 digits train, the last 360 are the held-out set


def digits(size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Scikit-learn's digits as (N, 1, size, size) floats in [0, 1] (bilinear resize) and int64 labels."""
    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    if size != 8:
        images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    return images, torch.tensor(data.target, dtype=torch.int64)


def standardize(train: torch.Tensor, *others: torch.Tensor) -> list[torch.Tensor]:
    """Every tensor shifted and scaled by the training images' mean and std (transforms.Normalize's role)."""
    mean, std = train.mean(), train.std()
    return [(t - mean) / std for t in (train, *others)]
