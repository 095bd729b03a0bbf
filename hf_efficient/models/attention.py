"""The attention registry and the contract every mechanism meets.

A mechanism is an `AttentionMechanism` subclass registered under a snake_case key. The backbone
builds one per layer with `build_attention(config, layer_idx)` and calls it as

    context, weights = mechanism(hidden_states, attention_mask, output_attentions=..., **kwargs)

- `hidden_states`: [batch, length, hidden]; `length` is already a multiple of
  `mechanism.pad_multiple(original_length)` (the backbone pads and unpads, a kernel never does).
- `attention_mask`: bool [batch, length], True for real tokens, or None when nothing is padded.
  A mechanism must honour it (padded keys get zero weight, padded queries give finite outputs).
- `kwargs`: per-call inputs some mechanisms use (e.g. `global_attention_mask`, bool [batch, length],
  padded by the backbone like the attention mask); mechanisms ignore the ones they do not know.
- returns `context` [batch, length, hidden] and attention weights in the mechanism's documented
  layout, or None when not requested. A mechanism that cannot return weights sets
  `supports_attention_weights = False`, and asking for them is a ValueError.

Under torch.export (`is_exporting()`) the length is symbolic and one program must serve every length:
`pad_multiple` then returns the multiple of one path valid at all lengths, and `forward` takes that
path without comparing the length to anything (a padded length arrives as a new symbol, see
`backbone.export_padded_length`). Where the function itself depends on the caller's length (Reformer-style
`full_attention_max_length`), the mechanism reads it from `kwargs["input_length"]`, which the backbone
passes under export only, and branches with `torch.cond`.
"""

import math
from collections.abc import Callable

import torch
from torch import nn

ATTENTION_REGISTRY: dict[str, type["AttentionMechanism"]] = {}

# Whether torch.export (also torch.onnx's dynamo exporter) is tracing: the length is then symbolic, so
# the backbone and kernels take one path valid at every length instead of choosing one from it.
# torch < 2.6 has no such flag (and cannot export these models).
is_exporting: Callable[[], bool] = getattr(torch.compiler, "is_exporting", lambda: False)


def register_attention(key: str) -> Callable[[type["AttentionMechanism"]], type["AttentionMechanism"]]:
    """Class decorator: make a mechanism buildable from `config.attention_type == key`."""

    def register(cls: type["AttentionMechanism"]) -> type["AttentionMechanism"]:
        if ATTENTION_REGISTRY.get(key, cls) is not cls:
            raise ValueError(f"attention key {key!r} is already registered to {ATTENTION_REGISTRY[key]}")
        ATTENTION_REGISTRY[key] = cls
        cls.attention_type = key
        return cls

    return register


def build_attention(config, layer_idx: int) -> "AttentionMechanism":
    key = config.attention_type_of_layer(layer_idx)
    if key not in ATTENTION_REGISTRY:
        raise ValueError(f"unknown attention {key!r} for layer {layer_idx}; registered: {sorted(ATTENTION_REGISTRY)}")
    return ATTENTION_REGISTRY[key](config, layer_idx)


class AttentionMechanism(nn.Module):
    """Base class: query/key/value projections named like `RobertaSelfAttention`, so RoBERTa weights load."""

    attention_type: str = ""  # the registry key
    supports_attention_weights: bool = True
    # Names of the per-call inputs (beyond the attention mask) the mechanism reads from `kwargs`.
    extra_inputs: tuple[str, ...] = ()

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

    def pad_multiple(self, seq_len: int) -> int:
        """The multiple the sequence must be padded to for an input of `seq_len` tokens (1: none)."""
        return 1

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

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError


# Every mechanism module registers itself on import; importing them here makes any config that
# names a key buildable, in the package and in a checkpoint folder loaded with trust_remote_code.
from .attention_bigbird import BigBirdAttention  # noqa: E402, F401
from .attention_block import BlockAttention  # noqa: E402, F401
from .attention_full import FullAttention  # noqa: E402, F401
from .attention_linformer import LinformerAttention  # noqa: E402, F401
from .attention_local import LocalAttention  # noqa: E402, F401
from .attention_lsh import LSHAttention  # noqa: E402, F401
from .attention_sliding import SlidingAttention  # noqa: E402, F401
