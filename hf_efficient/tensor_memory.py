"""Counters of the tensor memory a block of code allocates, which the benchmarks and the workflow's batch fitting
(`training/memory_fit.py`) both use: the workflow does not import the benchmarks.
"""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of the tensor storages that ops allocate inside the `with` block and that are alive at once.

    Counts what autograd saves, activations, gradients and outputs; not the scratch buffers a kernel
    allocates and frees inside itself, nor storages created before the block (weights, inputs).
    An op's output is a new allocation when its storage is not one of its inputs' (views, in-place ops).
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._storages: dict[int, weakref.ref] = {}

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        del self._storages[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        inputs = {leaf.untyped_storage().data_ptr() for leaf in tree_leaves((args, kwargs))
                  if isinstance(leaf, torch.Tensor)}
        for leaf in tree_leaves(output):
            if not isinstance(leaf, torch.Tensor):
                continue
            storage = leaf.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in inputs or key in self._storages:
                continue
            self._storages[key] = weakref.ref(storage, lambda _, key=key, nbytes=nbytes: self._freed(key, nbytes))
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        return output



class PeakAllocated:
    """Peak bytes of tensor memory allocated inside the `with` block beyond what was allocated at its start (`peak`).

    On CUDA the caching allocator's statistics (they include a kernel's scratch buffers); elsewhere
    `LiveTensorBytes`, since on CPU the resident set is no measure (glibc keeps freed pages).
    """

    def __init__(self, device: torch.device | str) -> None:
        self.cuda = torch.device(device).type == "cuda"
        self.peak = 0

    def __enter__(self) -> "PeakAllocated":
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.counter = LiveTensorBytes().__enter__()
        return self

    def peak_so_far(self) -> int:
        """The peak inside the block up to now (`peak` once it has ended)."""
        return max(torch.cuda.max_memory_allocated() - self.base, 0) if self.cuda else self.counter.peak

    def __exit__(self, *exc_info) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        else:
            self.counter.__exit__(*exc_info)
        self.peak = self.peak_so_far()
