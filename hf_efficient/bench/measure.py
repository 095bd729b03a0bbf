"""Time and peak memory of one model step, each measured in a fresh child process so runs do not share heaps.

On CPU the peak is the growth of the process's resident set over the step (VmHWM, reset through
/proc/self/clear_refs before the step); on CUDA it is `torch.cuda.max_memory_allocated` growth.
Time is wall-clock, or with `cpu_time` the process's CPU time on one thread: on a machine other jobs
share, the CPU time a step needs is not inflated by the time it waits for a core.
"""

import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# Must be picklable (e.g. `functools.partial` of a module-level function): it crosses into a spawned child.
ModelFactory = Callable[[], nn.Module]


MIN_TOTAL_SECONDS = 2.0
MAX_REPEATS = 50


@dataclass
class Measurement:
    seconds: float
    peak_mib: float
    error: str | None = None


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


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
    else:
        base = _rss_kib("VmRSS")
        _reset_peak_rss()
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
        peak = (_rss_kib("VmHWM") - base) / 1024
    return Measurement(seconds=min(times), peak_mib=max(peak, 0.0))


def _child(queue, factory, length, backward, repeats, device, cpu_time) -> None:
    try:
        queue.put(_measure_here(factory, length, backward, repeats, device, cpu_time))
    except Exception as error:  # reported in the table rather than killing the benchmark
        queue.put(Measurement(float("nan"), float("nan"), f"{type(error).__name__}: {error}"[:200]))


def measure(
    factory: ModelFactory,
    length: int,
    backward: bool = True,
    repeats: int = 2,
    device: str = "cpu",
    cpu_time: bool = False,
) -> Measurement:
    """Best-of-`repeats` seconds and peak memory growth (MiB) of one forward (+backward) at `length` tokens."""
    if cpu_time and device != "cpu":
        raise ValueError("cpu_time measures CPU steps; on a GPU the wall-clock time is the measure")
    if device == "cuda":  # the caching allocator's statistics isolate runs on the GPU
        return _measure_here(factory, length, backward, repeats, device)
    # spawn, not fork: a child forked after torch ran its thread pool can deadlock.
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, factory, length, backward, repeats, device, cpu_time))
    process.start()
    process.join()
    if queue.empty():
        return Measurement(float("nan"), float("nan"), f"child exited with code {process.exitcode} (out of memory?)")
    return queue.get()
