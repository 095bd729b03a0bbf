"""The attention registry, the per-call plan, and the contract every mechanism meets.

A mechanism is an `AttentionMechanism` subclass registered under a snake_case key. The backbone
builds one per layer with `build_attention(config, layer_idx)`. For each forward it asks every
mechanism once for its `AttentionPlan` (`mechanism.plan(length, output_attentions)`: the path it
takes and the multiple the input must be padded to), pads the attention input to the least common
multiple, and calls

    context, weights = mechanism(hidden_states, attention_mask, output_attentions, plan=plan, **kwargs)

- `hidden_states`: [batch, padded length, hidden] (the backbone pads and unpads, a kernel never does).
- `attention_mask`: bool [batch, padded length], True for real tokens, or None when nothing is padded.
  A mechanism must honour it (padded keys get zero weight, padded queries give finite outputs).
- `plan`: what `plan()` returned for this call; the kernel follows it and never re-derives the path.
- `kwargs`: per-call inputs some mechanisms use (e.g. `global_attention_mask`, bool [batch, padded length],
  padded like the attention mask); mechanisms ignore the ones they do not know.
- returns `context` [batch, padded length, hidden] and attention weights in the mechanism's documented
  layout, or None when not requested. A mechanism that cannot return weights sets
  `supports_attention_weights = False`, and asking for them is a ValueError.

Under torch.export (`is_exporting()`, read only where plans are made) the length is symbolic and one
program must serve every length: the plan then names the one path valid at all lengths, and its
`length` (the caller's, before padding) is what a mechanism whose function depends on it branches on
with `torch.cond` (Reformer-style `full_attention_max_length`).

A mechanism owns the config fields it reads: `config_defaults` declares them (a family config sets
them as typed fields; any other config may carry them as extra attributes, or use the defaults), and
`check_config(config, layer_idx)` raises a ValueError naming the field that cannot work for that layer.
Config modules import this file only, not the kernels: a config checks keys against the registry and
the built-in names, and the mechanisms' checks run for every registered key (at config construction
in the package, and always when a model is built).
"""

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

ATTENTION_REGISTRY: dict[str, type["AttentionMechanism"]] = {}
# The keys of the mechanisms in this folder, known before their modules are imported (configs do not
# import kernels); and the older names saved configs may use.
BUILT_IN_ATTENTION = ("full", "blockbert", "sliding", "bigbird", "linformer", "chunked_local", "lsh")
ATTENTION_ALIASES = {"block": "blockbert", "local": "chunked_local"}

# Whether torch.export (also torch.onnx's dynamo exporter) is tracing: the length is then symbolic, so
# plans take one path valid at every length. torch < 2.6 has no such flag (and cannot export these models).
is_exporting: Callable[[], bool] = getattr(torch.compiler, "is_exporting", lambda: False)


def attention_key(key: str) -> str:
    """The registry key of `key`, resolving the names older configs saved."""
    return ATTENTION_ALIASES.get(key, key)


def register_attention(key: str) -> Callable[[type["AttentionMechanism"]], type["AttentionMechanism"]]:
    """Class decorator: make a mechanism buildable from `config.attention_type == key`."""

    def register(cls: type["AttentionMechanism"]) -> type["AttentionMechanism"]:
        if ATTENTION_REGISTRY.get(key, cls) is not cls:
            raise ValueError(f"attention key {key!r} is already registered to {ATTENTION_REGISTRY[key]}")
        ATTENTION_REGISTRY[key] = cls
        cls.attention_type = key
        return cls

    return register


def check_attention_config(config) -> None:
    """ValueError naming the field when a key is unknown, or a layer's (registered) mechanism cannot work with `config`."""
    known = set(ATTENTION_REGISTRY) | set(BUILT_IN_ATTENTION)
    for name, keys in (("attention_type", [config.attention_type]),
                       ("layer_attention_types", config.layer_attention_types or [])):
        unknown = [key for key in keys if attention_key(key) not in known]
        if unknown:
            raise ValueError(f"`{name}`: unknown attention {unknown}; registered: {sorted(known)}.")
    if config.layer_attention_types is not None and len(config.layer_attention_types) != config.num_hidden_layers:
        raise ValueError(
            f"`layer_attention_types` has {len(config.layer_attention_types)} entries but the model has "
            f"`num_hidden_layers`={config.num_hidden_layers}."
        )
    for layer_idx in range(config.num_hidden_layers):
        mechanism = ATTENTION_REGISTRY.get(config.attention_type_of_layer(layer_idx))
        if mechanism is not None:
            mechanism.check_config(config, layer_idx)


def build_attention(config, layer_idx: int) -> "AttentionMechanism":
    return ATTENTION_REGISTRY[config.attention_type_of_layer(layer_idx)](config, layer_idx)


@dataclass(frozen=True)
class AttentionPlan:
    """What one mechanism does in one forward call, decided once from the caller's length.

    path: "dense" (plain dense attention), "pattern" (dense with the sparse pattern as a mask),
        "blocked" / "chunked" / "projected" (the mechanism's sparse kernel).
    multiple: the padded length must be a multiple of it (1: no padding needed).
    length: the caller's length before padding (symbolic under export).
    exporting: torch.export is tracing: take no branch on a size.
    """

    path: str
    multiple: int = 1
    length: int = 0
    exporting: bool = False


def defaults_of(config_class: type, *names: str) -> dict[str, Any]:
    """`config_defaults` read from the fields of the family config that declares them."""
    return {name: getattr(config_class, name) for name in names}


class AttentionMechanism(nn.Module):
    """Base class: query/key/value projections named like `RobertaSelfAttention`, so RoBERTa weights load."""

    attention_type: str = ""  # the registry key
    supports_attention_weights: bool = True
    # Names of the per-call inputs (beyond the attention mask) the mechanism reads from `kwargs`.
    extra_inputs: tuple[str, ...] = ()
    # The config fields the mechanism reads, with the value a config without the field gets: its family config's
    # (`defaults_of`), so that each default is written once, as that config's field.
    config_defaults: dict[str, Any] = {}

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = 1 / math.sqrt(self.head_dim)
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    @classmethod
    def option(cls, config, name: str) -> Any:
        """The value of one of `config_defaults`' fields in `config` (its default when the config has no such field)."""
        return getattr(config, name, cls.config_defaults[name])

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        """Raise ValueError naming the field when `config` cannot work for this mechanism in layer `layer_idx`."""

    def plan(self, length: int, output_attentions: bool = False) -> AttentionPlan:
        """This mechanism's plan for an input of `length` tokens (see `AttentionPlan`)."""
        exporting = is_exporting()
        path, multiple = self.choose_path(length, output_attentions, exporting)
        return AttentionPlan(path, multiple, length, exporting)

    def choose_path(self, length: int, output_attentions: bool, exporting: bool) -> tuple[str, int]:
        """(path, padding multiple) for `plan`; under export one path valid at every length."""
        return "dense", 1

    def pad_multiple(self, length: int) -> int:
        """The multiple the sequence must be padded to for an input of `length` tokens (1: none)."""
        return self.plan(length).multiple

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        plan: AttentionPlan | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if plan is None:  # called directly, not through the backbone: `hidden_states` is already padded
            plan = self.plan(hidden_states.shape[1], output_attentions)
        return self.attention(hidden_states, attention_mask, output_attentions, plan, **kwargs)

    def attention(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        plan: AttentionPlan,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The kernel: follows `plan`; returns the context [batch, length, hidden] and the weights or None."""
        raise NotImplementedError

    def reset_extra_parameters(self, std: float) -> None:
        """Initialise parameters beyond the standard Linear/Embedding/LayerNorm ones (with `transformers.initialization`)."""

    def bind_layers(self, mechanisms: list["AttentionMechanism"]) -> None:
        """Called once the encoder has built every layer's mechanism (in layer order), so that a mechanism
        can use a parameter another layer owns (e.g. Linformer's projection shared by all layers)."""

    def borrowed_parameters(self) -> list[nn.Parameter]:
        """Parameters this mechanism uses that another layer owns (see `bind_layers`): code that
        differentiates one layer at a time (reversible layers) must include them."""
        return []

    @property
    def attention_dropout(self) -> float:
        return self.dropout_prob if self.training else 0.0

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, length, hidden] -> [batch, heads, length, head_dim]."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

    @staticmethod
    def merge_heads(x: torch.Tensor) -> torch.Tensor:
        """[batch, heads, length, head_dim] -> [batch, length, hidden]."""
        batch, heads, length, head_dim = x.shape
        return x.transpose(1, 2).reshape(batch, length, heads * head_dim)

    def project_qkv(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (self.split_heads(self.query(hidden_states)), self.split_heads(self.key(hidden_states)),
                self.split_heads(self.value(hidden_states)))


def check_recompute_min_length(value) -> None:
    """The check of `blocked_recompute_min_length`, a field of the mechanisms that recompute their blocked path."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"`blocked_recompute_min_length` must be an int >= 0, got {value!r}.")


def recompute_blocked(plan: AttentionPlan, min_length: int) -> bool:
    """Whether a blocked path rebuilds its gathered key blocks in backward (with gradients on, `rebuilt_in_backward`):
    from `min_length` tokens up, taken from the caller's length (`plan.length`), so padding never changes it; always
    under export (where the length is symbolic and is not compared with anything)."""
    return plan.exporting or plan.length >= min_length


def rebuilt_in_backward(*recipes: tuple[torch.Tensor, Callable[[], torch.Tensor]]):
    """Saved-tensor hooks under which autograd keeps, for each `(tensor, rebuild)` of `recipes` that an op in the
    block saves for its backward (or a view of it), not the tensor but `rebuild`, which backward calls (without
    gradients, under the forward's autocast) to make it again; none without recipes or under torch.compile, which does
    not trace such hooks (and whose checkpoint of a blocked attention fails to compile in torch 2.13).

    For the key and value blocks a blocked path gathers (several times the keys and values: each query block's
    neighbours) and the attention kernel saves: backward then gathers them once more, instead of keeping them
    from the forward to the backward of the layer or recomputing the attention (a checkpoint). The hooks hold the
    tensors' addresses, not the tensors: autograd keeps the hooks as long as what they saved.
    """
    if not recipes or torch.compiler.is_compiling():
        return nullcontext()
    made = {tensor.untyped_storage().data_ptr(): (tensor.storage_offset(), rebuild) for tensor, rebuild in recipes}
    device = recipes[0][0].device.type
    autocast = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)

    def pack(tensor: torch.Tensor):
        offset, rebuild = made.get(tensor.untyped_storage().data_ptr(), (None, None))
        if rebuild is None:
            return tensor
        return rebuild, tensor.shape, tensor.stride(), tensor.storage_offset() - offset

    def unpack(saved) -> torch.Tensor:
        if isinstance(saved, torch.Tensor):
            return saved
        rebuild, shape, stride, offset = saved
        with torch.no_grad(), torch.autocast(device, dtype=autocast[1], enabled=autocast[0]):
            tensor = rebuild()
        return tensor.as_strided(shape, stride, tensor.storage_offset() + offset)

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def attend_to_blocks(
    query: torch.Tensor, make_keys: Callable[[], torch.Tensor], make_values: Callable[[], torch.Tensor],
    make_mask: Callable[[], torch.Tensor], rebuild: bool, **options,
) -> torch.Tensor:
    """`scaled_dot_product_attention` of `query` over the key and value blocks and the mask that the functions make
    (`options`: its other arguments). With `rebuild`, what they make is not kept for backward, which makes it again
    (`rebuilt_in_backward`: one more gather of the blocks)."""
    made = make_keys(), make_values(), make_mask()
    with rebuilt_in_backward(*zip(made, (make_keys, make_values, make_mask), strict=True) if rebuild else ()):
        return nn.functional.scaled_dot_product_attention(query, made[0], made[1], attn_mask=made[2], **options)


def with_unused(output: torch.Tensor, modules: list[Callable[[torch.Tensor], torch.Tensor]],
                hidden_states: torch.Tensor) -> torch.Tensor:
    """`output` unchanged, but joined in the autograd graph to `modules`, each called on a zero-length slice of
    `hidden_states` (a zero gradient for each of their parameters).

    For a call whose path skips some modules (a dense fallback, no global token): every trainable parameter then
    gets a gradient in every training step, as DDP without `find_unused_parameters` needs. The link goes through
    each module's own forward, so whatever wraps it sees an ordinary call: DeepSpeed ZeRO-3 gathers the
    parameters (a partitioned parameter is empty outside its module's forward), FSDP2 unshards them, and peft's
    adapters take part. Each output is empty or a product over the empty length (zeros), so its sum is exactly 0.
    """
    if not torch.is_grad_enabled():
        return output
    empty = hidden_states[:, :0]
    links = [link for link in (module(empty) for module in modules) if link.requires_grad]
    return output + sum(link.sum() for link in links) if links else output
