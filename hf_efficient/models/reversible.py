"""RevNet residual layers whose backward recomputes activations instead of storing them.

Each reversible layer maps (x1, x2) -> (y1, y2) = (x1 + F(x2), x2 + G(y1)), so its inputs can be
rebuilt from its outputs: x2 = y2 - G(y1), x1 = y1 - F(x2). Only the last layer's outputs are
kept, so training memory does not grow with depth. F and G may use dropout or random hashing:
the RNG state before each call is recorded in forward and replayed in backward (under the same
autocast setting), so the recomputed activations, and hence the gradients, are those of ordinary
backprop through the same layers.

A layer provides `attention_branch(x, context)` (F, with the per-call `context` every layer shares),
`feed_forward_branch(x)` (G) and `trainable_parameters()` (what F and G compute with, including parameters
shared across layers), and computes the whole reversible layer when called as `layer(x1, context, x2)`.

Two cases run with plain autograd instead of the memory-saving backward: layers whose parameters are gathered
only around module calls (FSDP2 units, DeepSpeed ZeRO-3), which must be called so that the parameters are whole
in forward and backward (an FSDP unit's activation-checkpoint wrapper, if any, does the recomputation), and
tracing by `torch.compile`, where recording the RNG state is a graph break.
"""

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn


class RngState:
    """The CPU and current-device RNG state, to replay a random computation exactly."""

    def __init__(self, device: torch.device):
        self.cpu = torch.get_rng_state()
        self.device = device
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextmanager
    def replayed(self) -> Iterator[None]:
        """A context in which the RNG starts from this state; the caller's RNG is untouched afterwards."""
        with torch.random.fork_rng(devices=[self.device] if self.cuda is not None else []):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


class _ReversibleStack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2, layers, context, *parameters):
        ctx.layers, ctx.context, ctx.parameters = layers, context, parameters
        ctx.autocast = autocast_state(x1.device)
        ctx.rng_states = []
        for layer in layers:
            f_state = RngState(x1.device)
            x1 = x1 + layer.attention_branch(x2, context)
            g_state = RngState(x1.device)
            x2 = x2 + layer.feed_forward_branch(x1)
            ctx.rng_states.append((f_state, g_state))
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    def backward(ctx, dy1, dy2):
        y1, y2 = ctx.saved_tensors
        grads: dict[nn.Parameter, torch.Tensor] = {}
        for layer, (f_state, g_state) in zip(reversed(ctx.layers), reversed(ctx.rng_states), strict=True):
            y1 = y1.detach().requires_grad_()
            g, dy1_from_g = recompute_and_backprop(layer, layer.feed_forward_branch, y1, dy2, g_state, ctx, (), grads)
            x2 = (y2 - g).requires_grad_()
            f, dx2_from_f = recompute_and_backprop(
                layer, layer.attention_branch, x2, dy1 + dy1_from_g, f_state, ctx, (ctx.context,), grads
            )
            dy1, dy2 = dy1 + dy1_from_g, dy2 + dx2_from_f
            y1, y2 = y1.detach() - f, x2.detach()
        return (dy1, dy2, None, None, *(grads.get(p) for p in ctx.parameters))


def recompute_and_backprop(layer, branch, x, grad_output, rng_state, ctx, args, grads):
    """Rerun one branch on `x` with its recorded RNG; return its output and d(output . grad_output)/dx."""
    parameters = layer.trainable_parameters()
    with rng_state.replayed(), torch.enable_grad(), torch.autocast(**ctx.autocast):
        output = branch(x, *args)
    x_grad, *parameter_grads = torch.autograd.grad(output, [x, *parameters], grad_output, allow_unused=True)
    for parameter, grad in zip(parameters, parameter_grads, strict=True):
        if grad is not None:
            grads[parameter] = grads[parameter] + grad if parameter in grads else grad
    return output.detach(), x_grad if x_grad is not None else torch.zeros_like(x)


def reversible_layer(layer: nn.Module, x1: torch.Tensor, x2: torch.Tensor, context):
    """(x1, x2) -> (x1 + F(x2), x2 + G(x1 + F(x2))) with plain autograd."""
    x1 = x1 + layer.attention_branch(x2, context)
    return x1, x2 + layer.feed_forward_branch(x1)


def gathered_around_calls(module: nn.Module) -> bool:
    """Whether `module`'s parameters are whole only inside module calls: `fully_shard` (FSDP2) made it a unit, or
    DeepSpeed ZeRO-3 partitioned them (`ds_tensor`; each is empty outside its module's forward and backward).

    The memory-saving stack cannot take such parameters: it hands them to one autograd function outside any
    call, where a ZeRO-3 parameter is empty, so autograd expects an empty gradient for it, and the recomputation's
    gradients mismatch ("LinearFunctionForZeroStage3Backward returned an invalid gradient ... expected shape
    compatible with [0]"), and an FSDP2 unit's hooks would not run.
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")  # not imported: no module can be a unit
    if fsdp is not None and isinstance(module, getattr(fsdp, "FSDPModule", ())):
        return True
    return any(hasattr(parameter, "ds_tensor") for parameter in module.parameters())


def autocast_state(device: torch.device) -> dict:
    device_type = device.type
    return {
        "device_type": device_type,
        "enabled": torch.is_autocast_enabled(device_type),
        "dtype": torch.get_autocast_dtype(device_type),
    }


def reversible_forward(
    x1: torch.Tensor,
    x2: torch.Tensor,
    layers: Sequence[nn.Module],
    context,
    memory_saving: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the reversible stack; with `memory_saving=False`, plain autograd through the same computation."""
    if any(gathered_around_calls(layer) for layer in layers):
        # FSDP2 and ZeRO-3 gather parameters in hooks around module calls, so the layers are called (their
        # `forward` runs the reversible layer) with plain autograd: recomputation in backward is then the
        # wrappers' (FSDP's activation checkpointing), not the reversible one.
        for layer in layers:
            x1, x2 = layer(x1, context, x2)
        return x1, x2
    if not memory_saving or not torch.is_grad_enabled():
        for layer in layers:
            x1, x2 = reversible_layer(layer, x1, x2, context)
        return x1, x2
    if torch.compiler.is_compiling():
        # Recording the RNG state (torch.get_rng_state) is a graph break, so under torch.compile the stack runs
        # with plain autograd: the compiled graph's partitioner chooses what it keeps and what it recomputes
        # (activations then grow with depth). Wrapping each layer in torch.utils.checkpoint instead fails in
        # dynamo (torch 2.13: "lift_tracked_freevar_to_input should not be called on root SubgraphTracer",
        # pytorch/pytorch#111031).
        for layer in layers:
            x1, x2 = reversible_layer(layer, x1, x2, context)
        return x1, x2
    # dict.fromkeys: a parameter several layers share is one input of the stack.
    parameters = list(dict.fromkeys(p for layer in layers for p in layer.trainable_parameters()))
    return _ReversibleStack.apply(x1, x2, layers, context, *parameters)
