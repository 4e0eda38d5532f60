"""A model trained in float64 or bfloat16 by a plain loop that converts its own batches (`net(x.double())`).

The doctor sees each batch before the loop converts it; its own forwards (the first look, its evaluations, the
fits of fresh copies) put the inputs in the model's dtype as such a loop must (harness/batches.py: in_dtype_of).
Before, its first look fed float32 to a float64 layer and raised into the user's loop.
"""

import pytest
import torch
from torch import nn

from doctor import Doctor
from harness.batches import in_dtype_of


def task(n: int, seed: int) -> list[tuple]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=generator)
    y = (x[:, :8].sum(dim=1) > 0).long() + (x[:, 8:].sum(dim=1) > 0).long()
    return [(x[i : i + 32], y[i : i + 32]) for i in range(0, n, 32)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_loop_training_another_dtype_is_judged_on_inputs_converted_as_it_converts_them(dtype):
    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3)).to(dtype)

    torch.manual_seed(0)
    net = model()
    optimizer, loss_fn = torch.optim.Adam(net.parameters(), lr=3e-3), nn.CrossEntropyLoss()
    doctor = Doctor(
        net,
        optimizer,
        loss_fn,
        validation=task(512, seed=1),
        model_factory=model,
        memorize_steps=100,
        capacity_steps=50,
    )
    for _ in range(6):
        for x, y in doctor.watch(task(1024, seed=0)):
            loss = loss_fn(net(x.to(dtype)), y)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    report = doctor.report()
    assert report.verdict == "healthy", str(report)
    assert report.measurements["final_val_acc"] > 0.8 and report.measurements["capacity_val_score"] > 0.8


def test_only_floating_inputs_that_differ_are_converted():
    net = nn.Linear(4, 2).double()
    ids, values = torch.arange(4), torch.randn(2, 4)
    converted = in_dtype_of(net, {"ids": ids, "values": values})
    assert converted["ids"] is ids and converted["values"].dtype == torch.float64
    same = torch.randn(2, 4, dtype=torch.float64)
    assert in_dtype_of(net, same) is same  # nothing to do: the tensor itself, no copy
