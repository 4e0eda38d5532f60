"""Every private torch name the project calls, each behind a check made once at import and a public fallback.

The instruments run inside a user's training loop, on every step, and must cost it little; so a few of them call
torch's private functions where the public ones take a Python loop over the parameters, and a few read private
state that torch offers no public way to ask for. This module is the one place in the project that names them
(a test holds the rest of the code to it): if a torch release renames or drops one, its check here turns it
off and its fallback takes over.
`FEATURES` says which are on (keyed by the private name); tests/test_torch_private.py switches each off and
shows the fallback gives the same measurements, or degrades as said below.

Checked on torch 2.13.0 (the CPU build `make setup` installs: every test) and 2.14.1 (the CUDA build this
machine keeps on disk, run on the CPU: the fast tests), where every check below finds its feature. No older
release was run (pyproject.toml says why); the checks and fallbacks are what should carry the code there, and
are themselves tested, on 2.13.0.

Fused over a list of tensors: speed only, one call instead of a Python loop of calls (on CUDA a few kernel
launches instead of one per parameter). On the CPU torch runs each of these as a loop of the per-tensor op,
so the fallback gives the same numbers bit for bit; on CUDA a fused reduction sums in its own order, so a norm
may differ from the fallback's in its last bits.

- `torch._foreach_norm` (`norms`): the norm of each tensor; fallback `torch.linalg.vector_norm` per tensor.
- `torch._foreach_abs`, `torch._foreach_max` (`largest_magnitudes`): the largest |entry| of each tensor;
  fallback `t.abs().max()` per tensor. `_foreach_max` is new in torch 2.4 (pytorch/pytorch#127187).
- `torch._foreach_mul` by 1.0 (`copies`) and `torch._foreach_sub` (`differences`): the weights before an
  update and the update itself; fallbacks `t.detach().clone()` and `a - b` per tensor.

Private state with no public equivalent:

- `Tensor._backward_hooks` (`drop_empty_hook_table`): once a tensor's last hook is removed its hook table is left
  empty, and autograd still calls into Python for every gradient of that tensor (about 3% of a small model's
  step); setting it to None ends that. Fallback: the empty table is left. Same measurements; loses that 3%.
- `Tensor._version` (`inplace_version`): the count of in-place writes, which tells the clearing instrument after
  backward whether a `.grad` kept since the optimizer step was zeroed in between. Fallback: None. A `.grad`
  replaced at each step (zero_grad's default) needs no counter and reads the same; one kept (zeroed in place)
  is then read through a gradient hook from the next step on, as a view is: the share of steps carried over,
  counted over one step fewer (the first, which the counter would have read as cleared), at the hook's cost
  (a call into Python in every backward pass, about 3% of a small model's step).
- `Tensor._base` (`is_view`): whether `.grad` is a view, whose version counter other tensors share (DDP's bucket
  views). Fallback: None (cannot tell), read as a view, so every `.grad` goes to the hook above, with its cost
  and its one step fewer. No public test stands in: a view of a whole bucket fills its storage as a tensor of
  its own does, and shares the bucket's counter all the same.
- `GradScaler._per_optimizer_states` (`unscaled_already`): whether the loop has called `unscale_` for this step,
  so whether `.grad` is still multiplied by the scale. Fallback: None, and `Loop.grad_scale()` is NaN under a
  GradScaler: the gradient census (norms, largest entries, the accumulation ratio) and the clipping reading are
  NaN (not measurable) under mixed precision rather than off by the scale (65536 by default); what reads the
  weights or the scale itself is unchanged, and so is a loop without a GradScaler.
- `GradScaler._scale` (`grad_scaler_scale`): the scale as the tensor it keeps on the device, read without waiting
  for the device. Fallback: None, and the caller divides by `get_scale()`: the same number, at one host-device
  synchronization per step on an accelerator.
- `torch.autograd.Variable._execution_engine.queue_callback` (`queue_after_backward`): run a function once the
  backward pass now running has finished, as DistributedDataParallel does; a hook on one tensor fires in the
  middle of backward, before `.grad` is complete. Fallback: nothing is queued and the function returns False;
  the caller then reads at its next event of its own (after the framework may have clipped the gradients).

Left as they are, since they call nothing private: harness/sweep.py and bench/grid.py `import torch._dynamo`, to
load early in a worker (or time) a module torch.optim imports at the first optimizer step anyway; and
benchmarks/realbugs/traincheck/pytorch-115607 names dynamo only in prose (the bug it re-creates was in it).
"""

import warnings
from collections.abc import Callable, Mapping

import torch


def _hook_table_can_be_dropped() -> bool:
    """Whether a tensor keeps its hooks in a table that can be set to None once emptied (probed on a new tensor)."""
    probe = torch.zeros(1, requires_grad=True)
    probe.register_hook(lambda grad: grad).remove()
    try:
        if not isinstance(probe._backward_hooks, Mapping) or probe._backward_hooks:
            return False
        probe._backward_hooks = None
        return probe._backward_hooks is None
    except (AttributeError, TypeError, RuntimeError):
        return False


def _version_counts_inplace_writes() -> bool:
    """Whether `_version` goes up by one at an in-place write (probed on a new tensor)."""
    probe = torch.zeros(1)
    before = getattr(probe, "_version", None)
    probe.add_(1)
    return isinstance(before, int) and getattr(probe, "_version", None) == before + 1


def _base_names_a_views_tensor() -> bool:
    """Whether `_base` is the tensor a view was taken of, and None for a tensor that is no view."""
    whole = torch.zeros(2)
    return getattr(whole, "_base", False) is None and getattr(whole[:1], "_base", None) is whole


def _grad_scaler_state() -> dict[str, bool]:
    """Whether a GradScaler keeps its per-optimizer stages and its scale tensor where this module reads them."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a release that warns about a CPU GradScaler: the probe is no user's
            probe = torch.amp.GradScaler("cpu", init_scale=2.0)
            probe.scale(torch.ones(()))  # makes the scale tensor
        stages = isinstance(probe._per_optimizer_states, Mapping) and hasattr(torch.amp.grad_scaler, "OptState")
        scale = torch.is_tensor(probe._scale) and probe._scale.item() == 2.0
    except (AttributeError, TypeError, RuntimeError):
        return {"GradScaler._per_optimizer_states": False, "GradScaler._scale": False}
    return {
        "GradScaler._per_optimizer_states": stages and hasattr(torch.amp.grad_scaler.OptState, "UNSCALED"),
        "GradScaler._scale": scale,
    }


def _engine_queues_callbacks() -> bool:
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    return callable(getattr(engine, "queue_callback", None))


FOREACH = ("_foreach_norm", "_foreach_abs", "_foreach_max", "_foreach_mul", "_foreach_sub")

# Which private features this torch has, found once at import; a test switches each off to run its fallback.
FEATURES: dict[str, bool] = {
    **{f"torch.{name}": hasattr(torch, name) for name in FOREACH},
    "Tensor._backward_hooks": _hook_table_can_be_dropped(),
    "Tensor._version": _version_counts_inplace_writes(),
    "Tensor._base": _base_names_a_views_tensor(),
    **_grad_scaler_state(),
    "torch.autograd.Variable._execution_engine.queue_callback": _engine_queues_callbacks(),
}


# ----- fused over a list of tensors: the same numbers, one call ----------------------------------------------------
def norms(tensors: list[torch.Tensor], order: float = 2) -> list[torch.Tensor]:
    """The vector norm of each tensor (order 0 counts its nonzero entries), as 0-d tensors of its dtype."""
    if not tensors:
        return []
    if FEATURES["torch._foreach_norm"]:
        return list(torch._foreach_norm(tensors, order))
    return [torch.linalg.vector_norm(t, order) for t in tensors]


def largest_magnitudes(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The largest absolute entry of each tensor (NaN where it holds one), as 0-d tensors of its dtype."""
    if not tensors:
        return []
    if FEATURES["torch._foreach_abs"] and FEATURES["torch._foreach_max"]:
        return list(torch._foreach_max(torch._foreach_abs(tensors)))
    return [t.abs().max() for t in tensors]


def copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """A copy of each tensor, out of autograd's graph (call it under torch.no_grad())."""
    if not tensors:
        return []
    if FEATURES["torch._foreach_mul"]:
        return list(torch._foreach_mul(tensors, 1.0))  # x * 1.0 is x exactly, NaN and inf included
    return [t.detach().clone() for t in tensors]


def differences(minuends: list[torch.Tensor], subtrahends: list[torch.Tensor]) -> list[torch.Tensor]:
    """`a - b` for each pair of tensors of the two lists (of the same length)."""
    if not minuends:
        return []
    if FEATURES["torch._foreach_sub"]:
        return list(torch._foreach_sub(minuends, subtrahends))
    return [a - b for a, b in zip(minuends, subtrahends, strict=True)]


# ----- private state: read where torch keeps it, or say it cannot be read ------------------------------------------
def drop_empty_hook_table(tensor: torch.Tensor) -> None:
    """After its last hook was removed: drop the tensor's empty hook table, which autograd would still call into."""
    if FEATURES["Tensor._backward_hooks"] and not tensor._backward_hooks:
        tensor._backward_hooks = None


def inplace_version(tensor: torch.Tensor) -> int | None:
    """How many in-place writes the tensor (and any tensor sharing its storage as a view) has had; None: unknown."""
    return tensor._version if FEATURES["Tensor._version"] else None


def is_view(tensor: torch.Tensor) -> bool | None:
    """Whether the tensor is a view of another one (so its version counter is shared); None: cannot tell."""
    return tensor._base is not None if FEATURES["Tensor._base"] else None


def unscaled_already(scaler, optimizer: torch.optim.Optimizer) -> bool | None:
    """Whether `scaler.unscale_(optimizer)` ran since the last update (so `.grad` holds true gradients).

    None where it cannot be read: this torch's GradScaler keeps no such record, or `scaler` is of another make.
    """
    states = getattr(scaler, "_per_optimizer_states", None)
    if not FEATURES["GradScaler._per_optimizer_states"] or not isinstance(states, Mapping):
        return None
    stage = states.get(id(optimizer), {}).get("stage")  # .get: the record is a defaultdict, and stays as it was
    return stage is not None and getattr(stage, "name", "") == "UNSCALED"


def grad_scaler_scale(scaler) -> torch.Tensor | None:
    """The scaler's scale as the tensor it keeps on the device (no host sync); None: divide by get_scale()."""
    scale = getattr(scaler, "_scale", None) if FEATURES["GradScaler._scale"] else None
    return scale if torch.is_tensor(scale) else None


def queue_after_backward(callback: Callable[[], None]) -> bool:
    """Queue `callback` to run once the backward pass now running has finished; call it from a hook in that pass.

    False, with nothing queued, where torch's autograd engine offers no queue: the caller reads at its next event.
    """
    if not FEATURES["torch.autograd.Variable._execution_engine.queue_callback"]:
        return False
    torch.autograd.Variable._execution_engine.queue_callback(callback)
    return True
