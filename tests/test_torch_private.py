"""harness/torch_private.py: each private torch feature, switched off, gives the same measurements by its fallback.

Or they degrade as the module says; and no other module of the project names a private torch attribute.
"""

import math
import re

import pytest
import torch
from conftest import ROOT
from optimizer_step import clip_and_step
from torch import nn

from harness import torch_private
from harness.instruments import Instruments
from harness.instruments.nonfinite import magnitudes, stacked
from harness.torch_private import FEATURES

# The features whose fallback gives the same measurements; the two GradScaler ones and the engine's callback queue
# are shown to degrade as documented, each in a test of its own.
SAME_NUMBERS = [
    "torch._foreach_norm",
    "torch._foreach_abs",
    "torch._foreach_max",
    "torch._foreach_mul",
    "torch._foreach_sub",
    "Tensor._backward_hooks",
    "Tensor._version",
    "Tensor._base",
]
TIMING = {"data_wait_s", "loop_s", "data_wait_share"}  # wall-clock columns: never the same twice


def switched_off(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(FEATURES, name, False)


def same(a, b) -> bool:
    """Equal, NaN equal to NaN, through lists."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_every_private_feature_is_found_on_the_torch_versions_the_module_names():
    # The module docstring says every check finds its feature on the versions tested; a release that drops one
    # runs on its fallback, and the docstring should then say so.
    assert [name for name, found in FEATURES.items() if not found] == [], torch.__version__


# ----- the fused list operations against their per-tensor fallbacks --------------------------------------------------
def awkward_tensors(dtype: torch.dtype) -> list[torch.Tensor]:
    """Tensors of several shapes holding zeros, negative values, an inf and a NaN."""
    torch.manual_seed(0)
    spiky = torch.randn(5, 7) * 1e3
    spiky[1, 2], spiky[3, 4] = -math.inf, 0.0
    holed = torch.randn(4)
    holed[0] = math.nan
    shapes = [torch.randn(()), torch.zeros(3), spiky, holed, torch.randn(2, 3, 3, 3), torch.randn(64, 33)]
    return [t.to(dtype) for t in shapes]


def assert_identical(fast: list[torch.Tensor], fallback: list[torch.Tensor]) -> None:
    assert len(fast) == len(fallback)
    for a, b in zip(fast, fallback, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_each_fused_list_operation_gives_the_numbers_of_its_per_tensor_fallback(monkeypatch, dtype):
    tensors, others = awkward_tensors(dtype), [t.flip(0) if t.dim() else -t for t in awkward_tensors(dtype)]

    def results() -> list[list[torch.Tensor]]:
        return [
            torch_private.norms(tensors),
            torch_private.norms(tensors, order=0),
            torch_private.largest_magnitudes(tensors),
            torch_private.copies(tensors),
            torch_private.differences(tensors, others),
        ]

    fast = results()
    switched_off(monkeypatch, *(name for name in SAME_NUMBERS if name.startswith("torch._foreach")))
    for fused, fallback in zip(fast, results(), strict=True):
        assert_identical(fused, fallback)
    assert [float(n) for n in fast[1]] == [float(int((t != 0).sum())) for t in tensors]  # order 0 counts nonzeros
    assert all(torch.equal(copy, t) or t.isnan().any() for copy, t in zip(fast[3], tensors, strict=True))


@pytest.mark.parametrize("bad", [None, math.nan, math.inf])
def test_the_doctors_per_step_check_reads_the_same_through_the_fallback(monkeypatch, bad):
    grads = [t.nan_to_num(0.0, 0.0, 0.0) for t in awkward_tensors(torch.float32)]
    if bad is not None:
        grads[2][0, 0] = bad
    fast = torch.isfinite(stacked(magnitudes(grads), torch.device("cpu"))).tolist()
    switched_off(monkeypatch, "torch._foreach_norm")
    assert torch.isfinite(stacked(magnitudes(grads), torch.device("cpu"))).tolist() == fast
    assert fast == [bad is None or i != 2 for i in range(len(grads))]


# ----- the instruments on a small loop, with each feature switched off ----------------------------------------------
def flatten_into_views(model: nn.Module) -> None:
    """Every .grad becomes a view of one flat buffer, as DistributedDataParallel's bucket views are."""
    buffer = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    for param, view in zip(model.parameters(), buffer.split([p.numel() for p in model.parameters()]), strict=True):
        param.grad = view.view_as(param)


def watched_run(zero="each step", scaler=None, clip=0.0, unscale_first=False, per_step=1, flat=False) -> dict:
    """A 4-8-3 ReLU network under SGD with momentum, 12 batches, census every step; `zero` as in test_instruments."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=1, scaler=scaler)
    for i, (x, y) in enumerate(instruments.watch([(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(12)])):
        if zero == "zeros" and i % per_step == 0:
            optimizer.zero_grad(set_to_none=False)
        if zero == "data" and i % per_step == 0 and i:
            for param in model.parameters():
                param.grad.data.zero_()  # unseen by the version counter
        loss = nn.functional.cross_entropy(model(x), y)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if flat and i == 0:
            flatten_into_views(model)
        if unscale_first:
            scaler.unscale_(optimizer)
        instruments.after_backward(loss)
        if (i + 1) % per_step:
            continue
        clip_and_step(model, optimizer, scaler, clip, unscale=not unscale_first)
        if zero == "each step":
            optimizer.zero_grad(set_to_none=True)
    return {**instruments.finish(), "checked_steps": instruments.checked_steps}


LOOPS = {
    "plain": {},
    "accumulated and clipped": {"zero": "zeros", "per_step": 3, "clip": 0.05},
    "zeroed through .data": {"zero": "data"},
    "never cleared": {"zero": "never"},
    "gradients as views": {"zero": "zeros", "flat": True},
    "mixed precision, clipped": {"clip": 0.05, "scaler": "cpu"},
    "mixed precision, unscaled first": {"unscale_first": True, "scaler": "cpu"},
}


@pytest.mark.parametrize("loop", LOOPS)
def test_each_fallback_gives_the_instruments_the_same_measurements(monkeypatch, loop):
    def run() -> dict:
        knobs = dict(LOOPS[loop])
        scaler = torch.amp.GradScaler(knobs.pop("scaler")) if "scaler" in knobs else None
        return watched_run(scaler=scaler, **knobs)

    fast = run()
    # The fused operations one by one are compared above, bit for bit; here together, and the state each alone.
    fused = [name for name in SAME_NUMBERS if name.startswith("torch.")]
    for off in [fused, *([name] for name in SAME_NUMBERS if name not in fused), SAME_NUMBERS]:
        with monkeypatch.context() as patch:
            switched_off(patch, *off)
            fallback = run()
        assert fallback.keys() == fast.keys()
        assert [k for k in fast if k not in TIMING | {"checked_steps"} and not same(fast[k], fallback[k])] == [], off
        # Read by the hook, the clearing check skips the first step the counter would have read as cleared.
        by_hook = {"Tensor._version", "Tensor._base"} & set(off)
        assert fast["checked_steps"] - fallback["checked_steps"] in ((0, 1) if by_hook else (0,)), off
    assert fast["checked_steps"] >= 3 and not math.isnan(fast["grad_norm_curve"][-1])


@pytest.mark.parametrize(
    ("off", "set_to_none", "hooks", "checked"),
    [
        ((), True, [0, 0], 5),
        ((), False, [0, 0], 5),  # zeroed in place, then added to: two writes, read as cleared after backward
        (("Tensor._version",), True, [0, 0], 5),  # a new .grad after each step needs no counter
        (("Tensor._version",), False, [0, 1], 4),  # the same .grad kept: the hook reads it from the next step on
        (("Tensor._base",), True, [0, 1], 4),  # cannot tell a view: read by the hook as one, from the next step on
    ],
)
def test_without_the_version_counter_or_the_view_base_the_clearing_check_falls_back_to_its_hook(
    monkeypatch, off, set_to_none, hooks, checked
):
    switched_off(monkeypatch, *off)
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    instruments = Instruments(model, optimizer, nn.functional.cross_entropy, census_every=50)
    for x, y in instruments.watch([(torch.randn(8, 4), torch.randint(0, 3, (8,)))] * 6):
        optimizer.zero_grad(set_to_none=set_to_none)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        instruments.after_backward(loss)
        optimizer.step()
    # The hook's cost, where it stays: one call into Python in every backward pass.
    assert sorted(len(p._backward_hooks or {}) for p in model.parameters()) == hooks
    assert instruments.finish()["grad_carried_share"] == 0.0 and instruments.checked_steps == checked


def test_without_dropping_the_emptied_hook_table_the_table_stays_and_nothing_else_changes(monkeypatch):
    param = torch.zeros(2, requires_grad=True)
    handle = param.register_hook(lambda grad: grad)
    handle.remove()
    switched_off(monkeypatch, "Tensor._backward_hooks")
    torch_private.drop_empty_hook_table(param)
    assert param._backward_hooks == {}  # autograd still calls into Python for it: the cost the fallback keeps
    monkeypatch.undo()
    torch_private.drop_empty_hook_table(param)
    assert param._backward_hooks is None


# ----- the features that degrade -----------------------------------------------------------------------------------
def test_where_the_scaler_cannot_say_whether_unscale_ran_the_gradients_read_nan_not_a_wrong_scale(monkeypatch):
    plain, read = watched_run(), watched_run(scaler=torch.amp.GradScaler("cpu"), clip=0.05)
    switched_off(monkeypatch, "GradScaler._per_optimizer_states")
    unread = watched_run(scaler=torch.amp.GradScaler("cpu"), clip=0.05)
    assert not math.isnan(read["grad_norm_curve"][-1]) and not math.isnan(read["grad_kept_at_step"])
    assert all(math.isnan(n) for n in unread["grad_norm_curve"]) and math.isnan(unread["grad_kept_at_step"])
    # What reads the weights or the scale, not .grad, is unchanged; and so is a loop without a scaler.
    assert same(unread["update_ratio_curve"], read["update_ratio_curve"]) and unread["amp_scale_last"] == 65536.0
    without = watched_run()
    assert [k for k in plain if k not in TIMING and not same(plain[k], without[k])] == []


def test_the_scale_tensor_divides_a_loss_as_get_scale_does_and_without_it_the_caller_is_told(monkeypatch):
    scaler = torch.amp.GradScaler("cpu", init_scale=3.0)  # not a power of 2: the division is not exact
    loss = torch.tensor(0.7)
    scaled = scaler.scale(loss)
    scale = torch_private.grad_scaler_scale(scaler)
    assert torch.is_tensor(scale) and torch.equal(scaled / scale, scaled / scaler.get_scale())
    assert torch_private.unscaled_already(scaler, torch.optim.SGD([torch.zeros(1)], lr=0.1)) is False
    switched_off(monkeypatch, "GradScaler._scale")
    assert torch_private.grad_scaler_scale(scaler) is None
    assert torch_private.grad_scaler_scale(object()) is None and torch_private.unscaled_already(object(), None) is None


@pytest.mark.parametrize("queue", [True, False], ids=["queued", "no queue"])
def test_a_callback_queued_from_a_hook_runs_once_backward_has_filled_every_grad(monkeypatch, queue):
    if not queue:
        switched_off(monkeypatch, "torch.autograd.Variable._execution_engine.queue_callback")
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    filled, queued = [], []

    def read_grads() -> None:
        filled.append([p.grad is not None for p in model.parameters()])

    def at_output(_grad) -> None:
        read_grads()  # in the middle of backward: no parameter's gradient is in .grad yet
        queued.append(torch_private.queue_after_backward(read_grads))

    output = model(torch.randn(2, 4))
    output.register_hook(at_output)
    output.sum().backward()
    assert queued == [queue]
    after_backward = [[True] * 4] if queue else []  # no queue: nothing runs, the caller reads at its next event
    assert filled == [[False] * 4, *after_backward]


# ----- the rule this module exists for --------------------------------------------------------------------------------
PRIVATE = re.compile(
    r"torch\._(?!dynamo\b)[A-Za-z]|\._backward_hooks|\._version\b|\._base\b|_per_optimizer_states|_execution_engine"
    r"|_scaler\._scale\b"
)
# Call sites in files another change owns, to be switched to grad_scaler_scale and queue_after_backward.
NOT_YET_SWITCHED: set[str] = set()  # modules still to move onto harness/torch_private.py: none


def test_no_module_but_torch_private_names_a_private_torch_attribute():
    found = []
    for folder in ("harness", "doctor", "analysis", "bench", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name == "harness/torch_private.py" or name in NOT_YET_SWITCHED:
                continue
            found += [f"{name}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE.search(line)]
    assert found == []
