"""Time and peak memory of one model step, each measured in a fresh child process so runs do not share heaps.

On CPU the peak is the most bytes of tensor storage allocated during one step and alive at once
(`LiveTensorBytes`, counted in an extra step after the timed ones), which unlike the resident set does
not move with the allocator's caching or other heaps; on CUDA it is `torch.cuda.max_memory_allocated` growth.
Time is wall-clock, or with `cpu_time` the process's CPU time on one thread: on a machine other jobs
share, the CPU time a step needs is not inflated by the time it waits for a core.
"""

import multiprocessing as mp
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# Must be picklable (e.g. `functools.partial` of a module-level function): it crosses into a spawned child.
ModelFactory = Callable[[], nn.Module]


MIN_TOTAL_SECONDS = 2.0
MAX_REPEATS = 50


@dataclass
class Measurement:
    seconds: float
    peak_mib: float
    error: str | None = None


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


def _step(model: nn.Module, input_ids: torch.Tensor, backward: bool) -> None:
    if backward:
        output = model(input_ids)
        output.last_hidden_state.float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            model(input_ids)


def _measure_here(
    factory: ModelFactory, length: int, backward: bool, repeats: int, device: str, cpu_time: bool = False
) -> Measurement:
    if cpu_time:
        torch.set_num_threads(1)
    clock = time.process_time if cpu_time else time.perf_counter
    torch.manual_seed(0)
    model = factory().to(device)
    model.train(backward)
    input_ids = torch.randint(5, model.config.vocab_size, (1, length), device=device)
    _step(model, input_ids, backward)  # warm-up: allocator, lazy init, sdpa kernel choice
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times: list[float] = []
    # Short steps are repeated until they add up to MIN_TOTAL_SECONDS, so the best time is not one noisy sample.
    while len(times) < repeats or (sum(times) < MIN_TOTAL_SECONDS and len(times) < MAX_REPEATS):
        start = clock()
        _step(model, input_ids, backward)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(clock() - start)
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        with LiveTensorBytes() as counter:  # slows the step down, so it is not one of the timed ones
            _step(model, input_ids, backward)
        peak = counter.peak / 2**20
    return Measurement(seconds=min(times), peak_mib=max(peak, 0.0))


def _measure_or_error(
    factory: ModelFactory, length: int, backward: bool, repeats: int, device: str, cpu_time: bool
) -> Measurement:
    try:
        return _measure_here(factory, length, backward, repeats, device, cpu_time)
    except Exception as error:  # reported in the table rather than killing the benchmark
        return Measurement(float("nan"), float("nan"), f"{type(error).__name__}: {error}"[:200])


def _child(queue, *args) -> None:
    queue.put(_measure_or_error(*args))


def measure(
    factory: ModelFactory,
    length: int,
    backward: bool = True,
    repeats: int = 2,
    device: str = "cpu",
    cpu_time: bool = False,
    same_process: bool = False,
) -> Measurement:
    """Best-of-`repeats` seconds and peak memory growth (MiB) of one forward (+backward) at `length` tokens.

    `same_process` skips the fresh process on CPU: on a loaded machine starting one (importing torch and
    transformers) can take longer than the measurement; the live-tensor peak does not depend on it.
    """
    if cpu_time and device != "cpu":
        raise ValueError("cpu_time measures CPU steps; on a GPU the wall-clock time is the measure")
    if device == "cuda" or same_process:  # the caching allocator's statistics isolate runs on the GPU
        return _measure_or_error(factory, length, backward, repeats, device, cpu_time)
    # spawn, not fork: a child forked after torch ran its thread pool can deadlock.
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, factory, length, backward, repeats, device, cpu_time))
    process.start()
    process.join()
    if queue.empty():
        return Measurement(float("nan"), float("nan"), f"child exited with code {process.exitcode} (out of memory?)")
    return queue.get()
