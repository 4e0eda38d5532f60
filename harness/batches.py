"""Batches of any shape: where a batch keeps its inputs and targets, and how the model takes the inputs.

A loop's batch can be an (inputs, targets) pair, a longer tuple, a dict (Hugging Face style,
`{"input_ids": ..., "attention_mask": ..., "labels": ...}`) or an object with attributes. A `BatchLayout` says
once where the inputs and the targets are; the instruments and the doctor read every batch through it, and call
the model on the inputs the way the loop does:

    BatchLayout(model)                                  # told nothing: see "Read without being told" below
    BatchLayout(model, inputs=(0, 1), targets=2)        # (x1, x2, y) tuples: model(x1, x2)
    BatchLayout(model, inputs=("input_ids", "attention_mask"), targets="labels")   # model(input_ids=, attention_mask=)
    BatchLayout(model, inputs=lambda b: b.image, targets=lambda b: b.label)        # anything, said as functions
    BatchLayout(model, output="logits")                 # the model returns a dict or object: the tensor to read

A key is an int (an item of a tuple or list), a str (a dict key, else an attribute) or a function of the batch;
`inputs` may also be a tuple of keys (several inputs). The inputs, once taken from the batch, are a tensor, a
tuple or list of tensors, or a dict of tensors; the model is called as `model(x)`, `model(*xs)` when its forward
takes that many positional inputs, or `model(**inputs)` when it takes the dict's keys by name (else the dict's
values in order, as positional inputs).

Read without being told:
- a tuple or list of two: (inputs, targets);
- a longer tuple or list whose last item is the targets, for a model whose forward takes one input fewer;
- a dict with one targets key (TARGET_KEYS); the inputs are its other keys the forward takes by name (all of
  them if it takes **kwargs), or the one other tensor;
- an object with one targets attribute (TARGET_KEYS) and one inputs attribute (INPUT_KEYS).
- the output: a tensor, or a dict or object with `logits` (a Hugging Face ModelOutput).
Anything else raises `BatchError` with one line saying what to pass. The targets are always one tensor, read
through `target_view` where one is set (a causal language model's labels, shifted to the positions that answer them).
"""

import copy
import inspect
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

TARGET_KEYS = ("labels", "label", "targets", "target", "y")
INPUT_KEYS = ("inputs", "input", "x", "features", "images", "image", "pixel_values", "input_ids", "data")
OUTPUT_KEY = "logits"  # what a Hugging Face model's output object holds the scores in

Key = int | str | Callable[[Any], Any]


class BatchError(ValueError):
    """A batch (or a model output) the layout cannot read; the message says in one line what to pass."""


def _kinds(items) -> str:
    return ", ".join(type(item).__name__ for item in items)


def _describe(batch) -> str:
    if isinstance(batch, Mapping):
        return f"a {type(batch).__name__} (keys {', '.join(repr(k) for k in list(batch)[:6])})"
    if isinstance(batch, tuple | list):
        return f"a {type(batch).__name__} of {len(batch)} ({_kinds(batch)})"
    return f"a {type(batch).__name__}"


def _get(batch, key: Key):
    """One item of a batch: by index, by dict key or attribute, or by the user's function."""
    if callable(key):
        return key(batch)
    if isinstance(key, str) and not isinstance(batch, Mapping):
        return getattr(batch, key)
    return batch[key]


# ----- inputs: a tensor, a tuple or list of tensors, or a dict of tensors --------------------------------------------
def tensors(inputs) -> list[torch.Tensor]:
    """Every tensor in the inputs, in order."""
    if torch.is_tensor(inputs):
        return [inputs]
    if isinstance(inputs, Mapping):
        return [t for value in inputs.values() for t in tensors(value)]
    if isinstance(inputs, tuple | list):
        return [t for value in inputs for t in tensors(value)]
    return []


def apply(inputs, fn: Callable[[torch.Tensor], torch.Tensor]):
    """The inputs with `fn` applied to each tensor, in the same structure (other values kept as they are)."""
    if torch.is_tensor(inputs):
        return fn(inputs)
    if isinstance(inputs, Mapping):
        return {key: apply(value, fn) for key, value in inputs.items()}
    if isinstance(inputs, tuple | list):
        values = [apply(value, fn) for value in inputs]
        return values if isinstance(inputs, list) else tuple(values)
    return inputs


def to_device(inputs, device):
    return apply(inputs, lambda t: t.to(device, non_blocking=True))


def rows(inputs) -> int:
    """Examples in the inputs: the length of their first tensor."""
    first = tensors(inputs)
    return len(first[0]) if first and first[0].dim() else 0


def head(inputs, n: int):
    """The first `n` examples of the inputs, detached."""
    return apply(inputs, lambda t: t[:n].detach())


def same_shape(a, b) -> bool:
    """Whether two inputs have the same structure and the same shapes and dtypes beyond the batch dimension."""
    left, right = tensors(a), tensors(b)
    if type(a) is not type(b) or len(left) != len(right):
        return False
    if isinstance(a, Mapping) and list(a) != list(b):
        return False
    return all(x.shape[1:] == y.shape[1:] and x.dtype == y.dtype for x, y in zip(left, right, strict=True))


def join(parts: list):
    """Inputs of several batches joined along the batch dimension (all of the same structure)."""
    first = parts[0]
    if torch.is_tensor(first):
        return torch.cat(parts)
    if isinstance(first, Mapping):
        return {key: join([p[key] for p in parts]) for key in first}
    if isinstance(first, tuple | list):
        joined = [join([p[i] for p in parts]) for i in range(len(first))]
        return joined if isinstance(first, list) else tuple(joined)
    return first


def floats(inputs) -> list[torch.Tensor]:
    """The floating-point tensors of the inputs (token ids and masks are not values one can scale or average)."""
    return [t for t in tensors(inputs) if t.is_floating_point()]


def in_dtype_of(model: nn.Module, inputs):
    """The inputs with their floating tensors in the model's floating dtype, where the two differ.

    A loop that trains a float64 or bfloat16 model converts its batches itself (`net(x.double())`), after the doctor
    has seen them: the doctor's own forwards (its first look, evaluations, fits) do what such a loop must do, or
    its first look would feed float32 to a float64 layer. The dtype is the first floating parameter's; token ids
    and masks are left as they are, and so is everything where the dtypes already agree (mixed precision's float32
    parameters under autocast).
    """
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype is None or all(t.dtype == dtype for t in floats(inputs)):
        return inputs
    return apply(inputs, lambda t: t.to(dtype) if t.is_floating_point() else t)


def scaled(inputs, factor: float):
    """The inputs with every floating-point tensor times `factor` (token ids and masks as they are)."""
    return apply(inputs, lambda t: t * factor if t.is_floating_point() else t)


def input_rms(inputs) -> float:
    """Root mean square of the floating-point input values (NaN when there are none, as with token ids).

    A tensor holding an infinite value is left out: an additive attention mask (-inf where a position may not
    attend, the transformer tutorial's `src_mask`) is no data with a scale. NaN inputs are the non-finite watch's.
    """
    values = [t.detach().float().reshape(-1) for t in floats(inputs) if not bool(torch.isinf(t).any())]
    if not values or not sum(len(t) for t in values):
        return math.nan
    return float((values[0] if len(values) == 1 else torch.cat(values)).pow(2).mean().sqrt())


def flat_rows(inputs, limit: int, to_host: bool = True) -> torch.Tensor | None:
    """The first `limit` examples as one float row each (every input flattened and laid side by side), on the CPU.

    None unless every input is floating point (token ids are not features a linear model can read). With
    `to_host=False` they stay on the inputs' device (a copy to the CPU waits for the device).
    """
    parts = tensors(inputs)
    if not parts or not all(t.is_floating_point() and t.dim() >= 1 for t in parts):
        return None
    n = min(len(parts[0]), limit)
    if any(len(t) < n for t in parts):
        return None
    flat = torch.cat([t[:n].detach().reshape(n, -1).float() for t in parts], dim=1)
    return flat.cpu() if to_host else flat


# ----- the model's forward: what it takes --------------------------------------------------------------------------
def forward_signature(model: nn.Module) -> tuple[list[str], float, set[str] | None]:
    """What the model's forward takes: its required positional names, its most positional inputs, its names.

    The most is inf with *args; the names are None with **kwargs. A signature that cannot be read takes anything.
    """
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return [], math.inf, None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional if p.default is inspect.Parameter.empty]
    most = math.inf if any(p.kind is p.VAR_POSITIONAL for p in parameters) else len(positional)
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return required, most, None if any(p.kind is p.VAR_KEYWORD for p in parameters) else named


class BatchLayout:
    """Where a batch keeps its inputs and targets, and how the model is called on them (see the module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        inputs: Key | Sequence[int | str] | None = None,
        targets: Key | None = None,
        output: Key | None = None,
    ):
        if isinstance(inputs, tuple | list) and not (
            inputs and (all(isinstance(k, int) for k in inputs) or all(isinstance(k, str) for k in inputs))
        ):
            raise BatchError(
                f"inputs={inputs!r}: several inputs are given as a tuple of ints (tuple items, called"
                " model(x1, x2)) or of strs (dict keys or attributes, called model(key=...)), not a mix"
            )
        for name, key in (("inputs", inputs), ("targets", targets), ("output", output)):
            if key is not None and not isinstance(key, int | str | tuple | list) and not callable(key):
                raise BatchError(
                    f"{name}={key!r}: give an int (a tuple item), a str (a dict key or attribute) or a function"
                )
        self.inputs, self.targets, self.output = inputs, targets, output
        # How the targets split from a batch are read, where not as they are: the doctor sets it at the first batch
        # for a causal language model that shifts its labels itself (harness/targets.py: shifted).
        self.target_view: Callable[[torch.Tensor], torch.Tensor] | None = None
        # How the output is read where not as the model returns it: the doctor sets it at the first step for a loop
        # that reshapes the output before its loss (`output.view(-1, ntokens)`), read from what the loss received.
        self.output_view: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._signature = forward_signature(model)
        self._readers: dict[type, Callable] = {}  # per kind of batch: a function batch -> (inputs, targets)
        self._calls: dict[tuple, Callable] = {}  # per kind of inputs: how the model takes them

    # ----- splitting a batch ------------------------------------------------------------------------------------
    def split(self, batch, where: str = "training") -> tuple[Any, torch.Tensor]:
        """(inputs, targets) of one batch; BatchError, in one line, when the layout cannot find them."""
        reader = self._readers.get(type(batch))
        if reader is None:
            reader = self._readers[type(batch)] = self._reader(batch, where)
        try:
            inputs, targets = reader(batch)
        except (KeyError, IndexError, AttributeError, TypeError) as error:
            raise BatchError(f"a {where} batch is {_describe(batch)}: {self._say()} ({error!r})") from None
        if not torch.is_tensor(targets):
            raise BatchError(
                f"the targets of a {where} batch are a {type(targets).__name__}, not a tensor: {self._say()}"
            )
        if not torch.is_tensor(inputs) and not tensors(inputs):
            raise BatchError(f"the inputs of a {where} batch hold no tensor ({type(inputs).__name__}): {self._say()}")
        return inputs, (targets if self.target_view is None else self.target_view(targets))

    def _say(self) -> str:
        return (
            "say where its inputs and targets are, Doctor(..., inputs=..., targets=...) with an int (a tuple item), a"
            " str (a dict key or attribute), a tuple of them (several inputs) or a function of the batch"
        )

    def _reader(self, batch, where: str) -> Callable:
        """How to split batches of this kind: as told, else read from the batch and the forward's signature."""
        inputs, targets = self.inputs, self.targets
        if isinstance(inputs, tuple | list):
            keys = tuple(inputs)
            if isinstance(keys[0], str):
                inputs = lambda b: {k: _get(b, k) for k in keys}  # noqa: E731 - one line per way of reading
            else:
                inputs = lambda b: tuple(b[k] for k in keys)  # noqa: E731
        if inputs is None or targets is None:
            guess_inputs, guess_targets = self._guess(batch, where, targets)
            inputs = inputs if inputs is not None else guess_inputs
            targets = targets if targets is not None else guess_targets
        if isinstance(inputs, int) and isinstance(targets, int):
            return operator.itemgetter(inputs, targets)  # pairs, the grid's and most loops': read at no cost
        return lambda b: (_get(b, inputs), _get(b, targets))

    def _guess(self, batch, where: str, targets: Key | None) -> tuple[Key, Key]:
        """Where the inputs and targets of this batch are, when the user did not say (see the module docstring)."""
        required, _, named = self._signature
        seen = f"a {where} batch is {_describe(batch)}"
        if torch.is_tensor(batch):
            raise BatchError(f"{seen}, with no targets beside the inputs: {self._say()}")
        if isinstance(batch, Mapping):
            keys = list(batch)
            if targets is None:
                found = [k for k in TARGET_KEYS if k in batch]
                if len(found) != 1:
                    names = ", ".join(repr(k) for k in TARGET_KEYS)
                    which = "no" if not found else f"{len(found)} ({', '.join(map(repr, found))})"
                    raise BatchError(f"{seen} with {which} targets key of {names}: {self._say()}")
                targets = found[0]
            elif isinstance(targets, str) and targets not in batch:
                raise BatchError(f"{seen}, without the key {targets!r} said to hold the targets: {self._say()}")
            rest = [k for k in keys if k != targets and torch.is_tensor(batch[k])]
            by_name = [k for k in rest if named is None or k in named]  # keys the model does not take are left out
            if by_name:
                return (lambda b: {k: b[k] for k in by_name}), targets
            if len(rest) == 1:
                return rest[0], targets
            raise BatchError(f"{seen}: the model's forward takes none of its keys by name; {self._say()}")
        if isinstance(batch, tuple | list):
            if targets is None and len(batch) == 2:
                return 0, 1
            if isinstance(targets, int) and len(batch) >= 2:  # the inputs are the other items
                others = [i for i in range(len(batch)) if i != targets % len(batch)]
                return (others[0] if len(others) == 1 else lambda b: tuple(b[i] for i in others)), targets
            if targets is None and len(batch) > 2 and len(required) == len(batch) - 1:
                last = len(batch) - 1  # (x1, x2, y) for forward(x1, x2): targets last, as loops unpack them
                return (lambda b: tuple(b[:last])), last
            takes = f"the model's forward takes {len(required)} input{'s' * (len(required) != 1)}"
            raise BatchError(f"{seen} and {takes} ({', '.join(required)}): {self._say()}")
        attributes = [k for k in (*TARGET_KEYS, *INPUT_KEYS) if torch.is_tensor(getattr(batch, k, None))]
        found_targets = [k for k in attributes if k in TARGET_KEYS]
        found_inputs = [k for k in attributes if k in INPUT_KEYS]
        if targets is None and len(found_targets) == 1:
            targets = found_targets[0]
        if targets is not None and len(found_inputs) == 1:
            return found_inputs[0], targets
        raise BatchError(f"{seen}: {self._say()}")

    # ----- calling the model ------------------------------------------------------------------------------------
    def forward(self, model: nn.Module, inputs) -> torch.Tensor:
        """The model's output tensor on these inputs, called as the loop calls it (see the module docstring)."""
        if isinstance(inputs, Mapping):
            kind = (type(inputs), tuple(inputs))
        else:
            kind = (type(inputs), len(inputs) if isinstance(inputs, tuple | list) else 0)
        call = self._calls.get(kind)
        if call is None:
            call = self._calls[kind] = self._call(inputs)
        return self.output_of(call(model, in_dtype_of(model, inputs)))

    def _call(self, inputs) -> Callable:
        """How the model takes inputs of this kind; BatchError when its forward needs inputs the batch lacks."""
        required, most, named = self._signature
        if isinstance(inputs, Mapping) and (named is None or all(k in named for k in inputs)):
            missing = [name for name in required if name not in inputs]
            if missing:
                raise BatchError(
                    f"the model's forward requires {', '.join(missing)}, which the inputs (keys"
                    f" {', '.join(map(repr, inputs))}) lack: {self._say()}"
                )
            return lambda model, x: model(**x)
        if isinstance(inputs, tuple | list) and len(inputs) > 1 and len(required) <= len(inputs) <= most:
            return lambda model, x: model(*x)
        if isinstance(inputs, Mapping) and len(inputs) > 1 and len(required) <= len(inputs) <= most:
            return lambda model, x: model(*x.values())  # keys the forward does not name: in the order given
        if len(required) > 1:
            given = "one tensor" if torch.is_tensor(inputs) else f"a {type(inputs).__name__} of {len(inputs)}"
            raise BatchError(
                f"the model's forward takes {len(required)} inputs ({', '.join(required)}) and the inputs of a batch"
                f" are {given}: {self._say()}"
            )
        return lambda model, x: model(x)  # one tensor, or a list or dict the forward takes as one argument

    def already_split(self) -> "BatchLayout":
        """The same layout for (inputs, targets) pairs this layout has split already (the same calls and output)."""
        twin = copy.copy(self)
        twin._readers = {tuple: lambda pair: pair}
        twin.target_view = None  # the pairs' targets were read through it when they were split
        return twin

    def output_of(self, output) -> torch.Tensor:
        """The tensor the loss reads from what the model returned (through `output_view`); BatchError if it cannot."""
        tensor = self._output_tensor(output)
        return tensor if self.output_view is None else self.output_view(tensor)

    def _output_tensor(self, output) -> torch.Tensor:
        if self.output is not None:
            picked = _get(output, self.output)
            if not torch.is_tensor(picked):
                raise BatchError(f"output={self.output!r} gave a {type(picked).__name__}, not a tensor")
            return picked
        if torch.is_tensor(output):
            return output
        logits = output.get(OUTPUT_KEY) if isinstance(output, Mapping) else getattr(output, OUTPUT_KEY, None)
        if torch.is_tensor(logits):
            return logits
        shown = _describe(output)
        raise BatchError(
            f"the model returned {shown}: the doctor reads one output tensor; say which, Doctor(..., output=...) with"
            " an int, a str (a key or attribute) or a function of the output"
        )

    def output_or_none(self, output) -> torch.Tensor | None:
        """The output tensor, or None where `output_of` would raise (inside hooks, which must never break a loop)."""
        try:
            return self.output_of(output)
        except (BatchError, KeyError, IndexError, AttributeError, TypeError):
            return None
