"""The cases that broke the rules before they read normalized features (issue 11), each as a user met it.

Healthy runs on problems of 2, 3 and 6 classes, a healthy SGD run with momentum, other sizes of the planted faults,
and a plain DataLoader feeding a small MLP. The real datasets used here (scikit-learn's wine and breast cancer)
are for evaluation only: no threshold was fitted or chosen on them.
"""

import pytest
import torch
from conftest import SHORT, make_config
from sklearn.datasets import load_breast_cancer, load_wine, make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from analysis.rules import diagnose
from doctor import Doctor, probe
from harness.cell import run_cell


def _tensors(features, labels, seed=0):
    x_train, x_val, y_train, y_val = train_test_split(
        features, labels, test_size=0.25, random_state=seed, stratify=labels
    )
    scaler = StandardScaler().fit(x_train)
    as_x = lambda a: torch.tensor(scaler.transform(a), dtype=torch.float32)  # noqa: E731
    as_y = lambda a: torch.tensor(a, dtype=torch.long)  # noqa: E731
    return TensorDataset(as_x(x_train), as_y(y_train)), TensorDataset(as_x(x_val), as_y(y_val))


def _mlp(n_inputs, n_classes):
    return lambda: nn.Sequential(
        nn.Linear(n_inputs, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, n_classes)
    )


PROBLEMS = {
    "wine (3 classes)": lambda: load_wine(return_X_y=True),
    "breast cancer (2 classes)": lambda: load_breast_cancer(return_X_y=True),
    "generated, 6 classes": lambda: make_classification(
        n_samples=900, n_features=12, n_informative=6, n_classes=6, n_clusters_per_class=1, random_state=3
    ),
}
OPTIMIZERS = {
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "sgd with momentum": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
}


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_a_healthy_run_on_a_problem_of_few_classes_is_healthy(problem, optimizer):
    features, labels = PROBLEMS[problem]()
    train, val = _tensors(features, labels)
    report = probe(
        _mlp(train.tensors[0].shape[1], int(labels.max()) + 1),
        lambda: DataLoader(train, batch_size=32, shuffle=True, drop_last=True),
        nn.CrossEntropyLoss(),
        OPTIMIZERS[optimizer],
        steps=400,
        validation=DataLoader(val, batch_size=256),
    )
    assert report.verdict == "healthy", str(report)


def test_a_healthy_sgd_run_with_momentum_on_digits_is_not_overfitting():
    record = run_cell(make_config("optimizer=sgd_momentum", "memorize.steps=0"))
    assert record["status"] == "ok" and diagnose(record)[0].verdict == "healthy"


@pytest.mark.parametrize(
    ("overrides", "verdict"),
    [
        (["fault=mild/periodic_bad_batch"], "periodic_bad_batch"),  # a bad batch every 60 steps, not 30
        (["dataset=synthetic", "model.hidden=[2]"], "model_too_small"),  # narrower than the planted 4 units
    ],
)
def test_other_sizes_of_a_planted_fault_are_named(overrides, verdict):
    record = run_cell(make_config(*overrides, "memorize.steps=0"))
    assert record["status"] == "ok" and diagnose(record)[0].verdict == verdict


def test_a_plain_dataloader_feeding_a_small_mlp_is_not_starved():
    features, labels = load_wine(return_X_y=True)
    train, val = _tensors(features, labels)
    model = _mlp(train.tensors[0].shape[1], 3)()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(model, optimizer, loss_fn, validation=DataLoader(val, batch_size=256))
    loader = DataLoader(train, batch_size=32, shuffle=True)
    for _epoch in range(60):
        for x, y in doctor.watch(loader):
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            doctor.after_backward(loss)
            optimizer.step()
    report = doctor.report()
    assert "starved_loader" not in [f.verdict for f in report.findings], str(report)


def test_a_short_cell_keeps_a_snapshot_at_every_budget_it_reaches():
    record = run_cell(make_config(*SHORT, "loop.steps=120", "loop.budgets=[50,100]"))
    assert [c["steps"] for c in record["checkpoints"]] == [50, 100, 120]
    assert record["checkpoints"][-1]["final_val_acc"] == record["final_val_acc"]
