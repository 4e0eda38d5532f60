"""Host reads: counting the reads of tensor values back to the host, each of which waits for the device.

On an accelerator every read of a tensor's value by the host (`.item()`, `float(t)`, `bool(t)`, `int(t)`,
`.tolist()`, `.cpu()`, `.numpy()`) waits until the device has finished all the work queued before it: a device
sync, which stalls the loop's next kernels. The doctor keeps its per-step readings on the model's device and reads
them at census steps only (docs/doctor.md, "What the doctor costs"); `HostReads` counts what it reads, for
tests/test_host_reads.py and `make bench-doctor`.

It counts two kinds of calls:

- through torch's dispatcher (a `TorchDispatchMode`): `aten._local_scalar_dense`, which every scalar read ends in
  whatever the Python call (`.item()`, `float`, `bool`, `int`, a comparison used as a condition), and copies from a
  device other than the CPU into the CPU (`.cpu()`, `.tolist()`, `.numpy()`, `.to("cpu")` of a GPU tensor). A
  copy asked for with `non_blocking=True` does not wait, and is not counted;
- for tensors on the CPU, the Python methods `.cpu()`, `.tolist()` and `.numpy()`: on the CPU these copy nothing
  and never reach the dispatcher, but the same call on a tensor of the model's device would copy and wait. So a
  loop run on the CPU counts what would sync on a GPU: its scalar reads and these calls. (A CPU tensor that would
  stay on the CPU in a GPU run, such as an optimizer's step counter, is counted too: compare with the bare loop.)
"""

import contextlib
import traceback
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SCALAR = torch.ops.aten._local_scalar_dense.default
_COPIES = (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default)
_METHODS = ("cpu", "tolist", "numpy")  # the Python calls that copy to the host without the dispatcher on the CPU


def _to_host(func, args, kwargs) -> bool:
    """Whether a copy op brings a tensor from another device to the CPU, waiting for it."""
    kwargs = kwargs or {}
    if kwargs.get("non_blocking") or (len(args) > 2 and args[2] is True and func is _COPIES[1]):
        return False
    if func is _COPIES[0]:  # _to_copy(self, *, dtype, layout, device, pin_memory, non_blocking, memory_format)
        source, device = args[0], kwargs.get("device")
        return device is not None and torch.device(device).type == "cpu" and source.device.type != "cpu"
    destination, source = args[0], args[1]  # copy_(self, src, non_blocking)
    return destination.device.type == "cpu" and source.device.type != "cpu"


class HostReads(TorchDispatchMode):
    """Counts host reads while entered (`with HostReads() as reads: ...`); `count` so far, `calls` by kind.

    With `where=True` each read also notes the innermost frame of this project's code that made it (`places`),
    to say which instrument read.
    """

    def __init__(self, where: bool = False):
        super().__init__()
        self.count = 0
        self.calls: Counter = Counter()
        self.where = where
        self.places: Counter = Counter()
        self._patched: contextlib.ExitStack | None = None

    def _note(self, kind: str) -> None:
        self.count += 1
        self.calls[kind] += 1
        if self.where:
            frames = [
                f for f in traceback.extract_stack()[:-2] if "/harness/" in f.filename or "/doctor/" in f.filename
            ]
            mine = [f for f in frames if not f.filename.endswith("host_reads.py")]
            self.places[
                f"{mine[-1].filename.rsplit('/', 2)[-2]}/{mine[-1].name}:{mine[-1].lineno}" if mine else "?"
            ] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _SCALAR:
            self._note("scalar")
        elif func in _COPIES and _to_host(func, args, kwargs):
            self._note("copy to host")
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._patched = contextlib.ExitStack()
        for name in _METHODS:
            self._patched.enter_context(_counting_method(self, name))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._patched.close()


@contextlib.contextmanager
def _counting_method(reads: HostReads, name: str):
    """Count `Tensor.<name>()` on CPU tensors while in the block (tensors elsewhere reach the dispatcher)."""
    original = getattr(torch.Tensor, name)

    def counted(tensor, *args, **kwargs):
        if tensor.device.type == "cpu":
            reads._note(name)
        return original(tensor, *args, **kwargs)

    setattr(torch.Tensor, name, counted)
    try:
        yield
    finally:
        setattr(torch.Tensor, name, original)
