"""TrainCheck mmpretrain-702, buggy: frozen_stages is set but the stages are never frozen, so they train.

Upstream issue: https://github.com/open-mmlab/mmpretrain/issues/702; TrainCheck's reproduction
silent-issue-detection/bug-reprod-scripts/mmpretrain-702 (a simulated trace there). A VGG backbone configured with
frozen_stages=1 freezes its first stage in `_freeze_stages()`, which the backbone calls from its `train(mode)`
method only (not from `__init__`, unlike mmpretrain's ResNet, RegNet and ConvNeXt). A loop that never calls
model.train() (a module starts in training mode) trains the stage the configuration froze, silently. Fix (fixed.py):
the backbone freezes its stages when it is built, as ResNet does.

Design kept (TrainCheck's vgg19-finetune-cifar10.py config): a VGG backbone (stages of 3x3 convolutions with ReLU,
each ending in a 2x2 max-pool, no batch norm) with its own classifier (Linear, ReLU, Dropout twice, then Linear to
the classes), frozen_stages=1, no pretrained weights (the config's checkpoint is commented out), a classification
head with cross-entropy; SGD lr 0.01, momentum 0.9, weight decay 1e-4; the rate times 0.1 after epoch 15 of 20 (step
policy); mmcv's initialization of the backbone (Kaiming-normal convolutions, N(0, 0.01) linear layers, the 0.01
scaled to the narrower layers here: with it as it is, the small classifier passes on almost nothing and neither
program learns); batch size 64, random crop with padding, random horizontal flip, normalized inputs; no evaluation
during training (the config has none). Changed: CIFAR-10 resized to 224 -> scikit-learn's digits resized to 16x16
(pad 2 for the crop), the first 1437 images (no validation(): the program evaluates nothing); VGG-19's five stages
of 64 to 512 channels and 4096-wide classifier -> three stages of two convolutions (16, 32, 64 channels) and a
128-wide classifier; 4 GPUs of 64 -> one process of 64, and 20 epochs -> 40 with the step after epoch 30 (920
steps).

Under the doctor: until c2370ba the doctor's look at the first batch switched the model to eval mode and back with
model.eval() and model.train(), and either call froze the stage here, so under the doctor the buggy program's stage
was frozen from its first step as well. The doctor's looks now set the modules' training flags without calling their
train() (harness/eval_mode.py), and the stage trains under the doctor as without it (checked: every parameter of the
first stage has requires_grad True, and the stage is in training mode, after five steps under the doctor).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from benchmarks.realbugs.traincheck.common import N_TRAIN, digits, epochs, standardize

SOURCE = (
    "OrderLab/TrainCheck-Evaluation-Workloads"
    " silent-issue-detection/bug-reprod-scripts/mmpretrain-702/vgg19-finetune-cifar10.py"
    " @ 2de9268be8845dade014e5e065693e4fdd9095d6"
)
BATCH_SIZE, RATE, EPOCHS, STEP_AT, SIZE, PAD = 64, 0.01, 40, 30, 16, 2
VGG19_CLASSIFIER_FAN_INS = (512 * 7 * 7, 4096, 4096)
IMAGES, LABELS = digits(SIZE)
(TRAIN_X,) = standardize(IMAGES[:N_TRAIN])
TRAIN_Y = LABELS[:N_TRAIN]
loss = nn.CrossEntropyLoss()


class Augmented(Dataset):
    """Random crop after zero padding, then a random horizontal flip (probability 0.5)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        padded = F.pad(self.x[i], (PAD, PAD, PAD, PAD))
        top, left = torch.randint(0, 2 * PAD + 1, (2,)).tolist()
        image = padded[:, top : top + SIZE, left : left + SIZE]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        return image, self.y[i]


class VGG(nn.Module):
    """A VGG backbone with its classifier; `frozen_stages` stages are frozen by `_freeze_stages()`."""

    def __init__(self, num_classes=10, widths=(16, 32, 64), frozen_stages=1):
        super().__init__()
        self.frozen_stages = frozen_stages
        stages, channels = [], 1
        for width in widths:
            stages.append(
                nn.Sequential(
                    nn.Conv2d(channels, width, 3, padding=1),
                    nn.ReLU(),
                    nn.Conv2d(width, width, 3, padding=1),
                    nn.ReLU(),
                    nn.MaxPool2d(2),
                )
            )
            channels = width
        self.stages = nn.ModuleList(stages)
        side = SIZE // 2 ** len(widths)
        self.classifier = nn.Sequential(
            nn.Linear(channels * side * side, 128),
            nn.ReLU(),
            nn.Dropout(),
            nn.Linear(128, 128),
            nn.ReLU(),
            nn.Dropout(),
            nn.Linear(128, num_classes),
        )

        self.init_weights()
        self.init_freeze()

    def init_weights(self) -> None:
        """The backbone's own initialization: Kaiming normal (fan out, ReLU) convolutions, N(0, 0.01) linear layers.

        The 0.01 is for VGG-19's classifier (fan-ins 512 * 7 * 7, 4096, 4096); each narrower layer here gets it scaled
        by the square root of the original fan-in over its own, so that it passes on the same share of its input.
        """
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
        linears = [m for m in self.classifier if isinstance(m, nn.Linear)]
        for layer, original in zip(linears, VGG19_CLASSIFIER_FAN_INS, strict=True):
            nn.init.normal_(layer.weight, std=0.01 * math.sqrt(original / layer.in_features))
            nn.init.zeros_(layer.bias)

    def init_freeze(self) -> None:
        """What the backbone does about frozen stages when it is built."""
        # the bug: nothing; the stages are frozen only when train() is called, which the loop never does

    def _freeze_stages(self) -> None:
        for stage in self.stages[: self.frozen_stages]:
            stage.eval()
            for param in stage.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True):
        super().train(mode)
        self._freeze_stages()
        return self

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return self.classifier(torch.flatten(x, 1))


def model() -> nn.Module:
    return VGG()


def batches():
    return DataLoader(Augmented(TRAIN_X, TRAIN_Y), batch_size=BATCH_SIZE, shuffle=True)


def optimizer(params):
    return torch.optim.SGD(params, lr=RATE, momentum=0.9, weight_decay=1e-4)


def train(Doctor):
    net = model()  # built in training mode; the loop never calls net.train()
    opt = optimizer(net.parameters())
    schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[STEP_AT], gamma=0.1)
    doctor = Doctor(net, opt, loss)
    train_dl = batches()
    for _ in range(epochs(EPOCHS)):
        for x, y in doctor.watch(train_dl):
            opt.zero_grad()
            batch_loss = loss(net(x), y)
            batch_loss.backward()
            doctor.after_backward(batch_loss)
            opt.step()
        schedule.step()
    return doctor
