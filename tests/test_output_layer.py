"""The output layer the output checks name (harness/instruments/signals.py `last_module`).

It is the last leaf module the model's forward ran, never a loss kept as an attribute (`self.loss =
nn.CrossEntropyLoss()`, often registered last) nor a module the forward does not use; where no forward was
watched, the last leaf registered (a Sequential's order). The grid's three families name the same layer either way
(their last registered leaf is the last to run).
"""

import pytest
import torch
from torch import nn

from harness.instruments import Instruments, last_module
from harness.instruments.signals import leaves_run


class LossAttribute(nn.Module):
    """The common pattern: the loss kept on the model, registered after the layers."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.body(x)


class HeadFirst(nn.Module):
    """The head registered before the encoder it follows."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(16, 3)
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.Tanh())

    def forward(self, x):
        return self.head(self.encoder(x))


class UnusedAuxiliary(nn.Module):
    """An auxiliary head the forward never runs (used by some other loss, or left over), registered last."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        self.aux = nn.Linear(16, 5)

    def forward(self, x):
        return self.net(x)


class SigmoidThenLoss(nn.Module):
    """An activation module after the last layer (what squashed_logits names), then a loss attribute."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(8, 3)
        self.act = nn.Sigmoid()
        self.criterion = nn.BCELoss()

    def forward(self, x):
        return self.act(self.out(x))


CASES = [
    (LossAttribute, "body.2 (Linear)"),
    (HeadFirst, "head (Linear)"),
    (UnusedAuxiliary, "net.2 (Linear)"),
    (SigmoidThenLoss, "act (Sigmoid)"),
]


@pytest.mark.parametrize(("model_class", "layer"), CASES)
def test_the_output_layer_is_the_last_module_the_forward_ran_and_never_a_loss(model_class, layer):
    torch.manual_seed(0)
    model = model_class()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy)
    batches = [(torch.randn(32, 8), torch.randint(0, 3, (32,))) for _ in range(4)]
    for x, y in instruments.watch(batches):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    assert instruments.finish()["output_layer"] == layer
    assert not any(m._forward_hooks for m in model.modules())  # the watch of the forward left nothing behind


def test_without_a_forward_watched_the_last_registered_module_that_is_not_a_loss():
    assert last_module(LossAttribute()) == "body.2 (Linear)"
    assert last_module(nn.Sequential(nn.Linear(2, 2), nn.Sigmoid())) == "1 (Sigmoid)"
    assert last_module(nn.CrossEntropyLoss()) == "CrossEntropyLoss"  # nothing else to name


def test_leaves_run_lists_the_leaves_in_the_order_they_ran():
    model = HeadFirst()
    with torch.no_grad(), leaves_run(model) as ran:
        model(torch.randn(2, 8))
    assert ran == ["encoder.0", "encoder.1", "head"]
