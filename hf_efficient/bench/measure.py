"""Time and peak memory of one model step, each measured in a fresh child process so runs do not share heaps.

On CPU the peak is the most bytes of tensor storage allocated during one step and alive at once
(`LiveTensorBytes`, counted in an extra step after the timed ones), which unlike the resident set does
not move with the allocator's caching or other heaps; on CUDA it is `torch.cuda.max_memory_allocated` growth.
Time is wall-clock, or with `cpu_time` the process's CPU time on one thread: on a machine other jobs
share, the CPU time a step needs is not inflated by the time it waits for a core.
`measure_compiled` times the model eager and through `torch.compile` in one process, their steps taking
turns, so that both see the same machine; compilation is timed apart.
"""

import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from ..tensor_memory import LiveTensorBytes

# Must be picklable (e.g. `functools.partial` of a module-level function): it crosses into a spawned child.
ModelFactory = Callable[[], nn.Module]


MIN_TOTAL_SECONDS = 2.0
MAX_REPEATS = 50


@dataclass
class Measurement:
    seconds: float
    peak_mib: float
    error: str | None = None
    # A compiled model's first step, compilation included (tracing, code generation, C++ or Triton), wall-clock;
    # not one of the timed steps.
    compile_seconds: float | None = None


def step(model: nn.Module, input_ids: torch.Tensor, backward: bool, dtype: torch.dtype) -> None:
    """One forward (+backward), the forward under autocast to `dtype` unless it is float32; a forward alone runs in
    eval mode without autograd, as inference does."""
    with torch.autocast(input_ids.device.type, dtype=dtype, enabled=dtype != torch.float32), \
            torch.set_grad_enabled(backward):
        output = model(input_ids)
    if backward:
        output.last_hidden_state.float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)


def best_times(steps: dict[str, Callable[[], None]], clock: Callable[[], float], repeats: int, device: str) -> dict[str, float]:
    """Best time of each step, the steps taking turns, so that a burst of load from elsewhere hits all of them alike.

    Short steps are repeated until they add up to MIN_TOTAL_SECONDS, so the best time is not one noisy sample.
    """
    times: dict[str, list[float]] = {name: [] for name in steps}
    while any(len(t) < repeats or (sum(t) < MIN_TOTAL_SECONDS and len(t) < MAX_REPEATS) for t in times.values()):
        for name, run_step in steps.items():
            start = clock()
            run_step()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(clock() - start)
    return {name: min(t) for name, t in times.items()}


def _measure_here(
    factory: ModelFactory, length: int, backward: bool, repeats: int, device: str, cpu_time: bool = False,
    dtype: torch.dtype = torch.float32, compiled: bool = False, batch_size: int = 1,
) -> dict[str, Measurement]:
    """{"eager": ...} and with `compiled` also {"compiled": ...} (the same model through `torch.compile`)."""
    if cpu_time:
        torch.set_num_threads(1)
    clock = time.process_time if cpu_time else time.perf_counter
    torch.manual_seed(0)
    model = factory().to(device)
    model.train(backward)
    input_ids = torch.randint(5, model.config.vocab_size, (batch_size, length), device=device)
    steps = {"eager": partial(step, model, input_ids, backward, dtype)}
    steps["eager"]()  # warm-up: allocator, lazy init, sdpa kernel choice
    compile_seconds = None
    if compiled:
        steps["compiled"] = partial(step, torch.compile(model), input_ids, backward, dtype)
        start = time.perf_counter()
        steps["compiled"]()
        compile_seconds = time.perf_counter() - start
        steps["compiled"]()  # warm-up of the compiled code itself
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    seconds = best_times(steps, clock, repeats, device)
    if device == "cuda":  # with `compiled`, the larger of the two
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        with LiveTensorBytes() as counter:  # slows the step down, so it is not one of the timed ones
            steps["eager"]()
        peak = counter.peak / 2**20
    measurements = {"eager": Measurement(seconds["eager"], max(peak, 0.0))}
    if compiled:  # the live-tensor count cannot watch a compiled step (it would trace the dispatch mode)
        measurements["compiled"] = Measurement(seconds["compiled"], float("nan"), compile_seconds=compile_seconds)
    return measurements


def _measure_or_error(
    factory: ModelFactory, length: int, backward: bool, repeats: int, device: str, cpu_time: bool, dtype: torch.dtype,
    compiled: bool, batch_size: int,
) -> dict[str, Measurement]:
    try:
        return _measure_here(factory, length, backward, repeats, device, cpu_time, dtype, compiled, batch_size)
    except Exception as error:  # reported in the table rather than killing the benchmark
        failed = Measurement(float("nan"), float("nan"), f"{type(error).__name__}: {error}"[:200])
        return {"eager": failed, "compiled": failed} if compiled else {"eager": failed}


def _child(queue, *args) -> None:
    queue.put(_measure_or_error(*args))


def _measure_all(
    factory: ModelFactory, length: int, backward: bool, repeats: int, device: str, cpu_time: bool, same_process: bool,
    dtype: torch.dtype, compiled: bool, batch_size: int,
) -> dict[str, Measurement]:
    if cpu_time and device != "cpu":
        raise ValueError("cpu_time measures CPU steps; on a GPU the wall-clock time is the measure")
    args = (factory, length, backward, repeats, device, cpu_time, dtype, compiled, batch_size)
    if device == "cuda" or same_process:  # the caching allocator's statistics isolate runs on the GPU
        return _measure_or_error(*args)
    # spawn, not fork: a child forked after torch ran its thread pool can deadlock.
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, *args))
    process.start()
    process.join()
    if queue.empty():
        failed = Measurement(float("nan"), float("nan"), f"child exited with code {process.exitcode} (out of memory?)")
        return {"eager": failed, "compiled": failed}
    return queue.get()


def measure(
    factory: ModelFactory,
    length: int,
    backward: bool = True,
    repeats: int = 2,
    device: str = "cpu",
    cpu_time: bool = False,
    same_process: bool = False,
    dtype: torch.dtype = torch.float32,
    batch_size: int = 1,
) -> Measurement:
    """Best-of-`repeats` seconds and peak memory growth (MiB) of one forward (+backward) of `batch_size` inputs of
    `length` tokens.

    `same_process` skips the fresh process on CPU: on a loaded machine starting one (importing torch and
    transformers) can take longer than the measurement; the live-tensor peak does not depend on it.
    `dtype`: the forward runs under autocast to it (bfloat16, float16 on CUDA) unless it is float32.
    """
    return _measure_all(factory, length, backward, repeats, device, cpu_time, same_process, dtype, False,
                        batch_size)["eager"]


def measure_compiled(
    factory: ModelFactory,
    length: int,
    backward: bool = True,
    repeats: int = 2,
    device: str = "cpu",
    cpu_time: bool = False,
    same_process: bool = False,
    dtype: torch.dtype = torch.float32,
    batch_size: int = 1,
) -> dict[str, Measurement]:
    """`measure` of the model eager and through `torch.compile`, in one process, their timed steps taking turns:
    {"eager": ..., "compiled": ...}. The compiled one's first steps (compilation) are not timed; its
    `compile_seconds` says how long they took. Its peak memory is not counted (nan) on CPU.
    """
    return _measure_all(factory, length, backward, repeats, device, cpu_time, same_process, dtype, True, batch_size)
