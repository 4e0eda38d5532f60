"""A layer left out of the optimizer is named, with its tensors' names (analysis/checks/parameters.py: params_left_out).

`Adam(net[0].parameters())` trains the first layer alone: the output layer gets gradients and never moves. It is a
small share of the parameters, so params_not_updated's fitted share never read it (the issue's MLP: 0.135 against
0.55), and the run was `unexplained_failure`. A tensor another optimizer steps (a GAN's discriminator beside the
watched generator's optimizer) changes over the run, and is not named.
"""

import pytest
import torch
from torch import nn

from doctor import Doctor
from harness.instruments.update_ratios import bit_checksums

pytestmark = pytest.mark.usefixtures("one_thread")

_generator = torch.Generator().manual_seed(0)
X = torch.randn(512, 10, generator=_generator)
Y = X[:, :3].argmax(dim=1)


def batches(epochs: int = 4):
    return [(X[i : i + 32], Y[i : i + 32]) for _ in range(epochs) for i in range(0, 512, 32)]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))


def watched(net: nn.Module, optimizer, others=()) -> "Doctor":
    """A plain loop under the doctor; `others`: optimizers stepped beside the watched one, as a GAN's are."""
    doctor = Doctor(net, optimizer, nn.functional.cross_entropy)
    for x, y in doctor.watch(batches()):
        loss = nn.functional.cross_entropy(net(x), y)
        for opt in (optimizer, *others):
            opt.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        for opt in (optimizer, *others):
            opt.step()
    return doctor


def test_a_layer_left_out_of_the_optimizer_is_named_with_its_tensors():
    net = mlp()
    report = watched(net, torch.optim.Adam(net[0].parameters(), lr=1e-2)).report()
    assert report.verdict == "params_left_out", str(report)
    assert report.measurements["unchanged_params"] == ["2.weight", "2.bias"]
    assert (
        "2 parameter tensor(s) got gradients but ended the run bit for bit as they began" in report.findings[0].evidence
    )
    assert "2.weight, 2.bias" in report.findings[0].evidence
    assert "Adam(model.parameters())" in report.findings[0].next_step


def test_every_layer_in_the_optimizer_names_none():
    net = mlp()
    report = watched(net, torch.optim.Adam(net.parameters(), lr=1e-2)).report()
    assert report.measurements["unchanged_param_count"] == 0 and report.verdict == "healthy", str(report)


def test_a_layer_another_optimizer_steps_is_not_named():
    net = mlp()
    head = torch.optim.SGD(net[2].parameters(), lr=0.05)  # steps the layer the watched optimizer leaves out
    report = watched(net, torch.optim.Adam(net[0].parameters(), lr=1e-2), others=[head]).report()
    assert report.measurements["unchanged_param_count"] == 0
    assert "params_left_out" not in [f.verdict for f in report.findings]


def test_the_checksums_see_a_change_of_one_bit_that_no_norm_would():
    weights = torch.ones(1000)
    before = bit_checksums([weights])
    weights[7] = torch.nextafter(weights[7], torch.tensor(2.0))  # one ulp
    assert torch.linalg.vector_norm(weights).item() == pytest.approx(torch.linalg.vector_norm(torch.ones(1000)).item())
    assert bit_checksums([weights]) != before
    assert bit_checksums([torch.ones(1000, dtype=torch.bfloat16)]) == bit_checksums(
        [torch.ones(1000, dtype=torch.bfloat16)]
    )
