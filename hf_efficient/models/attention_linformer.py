"""Linformer attention (Wang et al. 2020): keys and values projected along the length axis to k rows.

For an input of L tokens every query attends to the k rows of E[:, :L] @ K and F[:, :L] @ V, so the
cost is O(L * k) instead of O(L^2). Padded keys and values are zeroed before the projection, so a
right-padded sequence gets exactly what it gets alone (the projections read positions, so left
padding changes them). A sequence of at most k real tokens cannot be compressed and gets exact
dense attention instead; which sequences do is decided per call from the attention mask.
"""

import sys

import torch
from torch import nn
from transformers import initialization as init
from transformers.core_model_loading import WeightRenaming

from .attention import AttentionMechanism, defaults_of, register_attention, with_unused
from .attention_full import FullAttention
from .configuration_linformer import HfeLinformerConfig


@register_attention("linformer")
class LinformerAttention(FullAttention):
    """Attention over k learned length projections of the keys and values.

    Module `length_projection` (a `LengthProjection`, weight [n, projected_length, max_sequence_length])
    holds the stacked E and F: n = 2 * heads (E per head, then F per head) for sharing "none", 2 (E, F)
    for "headwise", 1 (E = F) for "key_value"; for "layerwise" only the first Linformer layer stores
    it (n = 1) and every other Linformer layer uses that one.

    Attention weights: [batch, heads, length, min(length, projected_length)]. For a sequence that
    uses the projection the last axis is the projected row; for one that falls back to dense
    attention (at most `projected_length` real tokens) it is the key position.
    """

    config_defaults = defaults_of(HfeLinformerConfig, "projected_length", "projection_sharing")

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.sharing = self.option(config, "projection_sharing")
        self.projected_length = self.option(config, "projected_length")
        self.max_length = config.max_sequence_length
        if self.sharing == "layerwise" and layer_idx != first_layer_of(config, self.attention_type):
            return  # uses the first Linformer layer's projection, bound in `bind_layers`
        stacked = {"none": 2 * self.num_heads, "headwise": 2}.get(self.sharing, 1)
        self.length_projection = LengthProjection(stacked, self.projected_length, self.max_length)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # `save_pretrained` writes the projection under its older key (see `LEGACY_KEYS`); `from_pretrained` renames it
        # back, and so does this for `load_state_dict` (the Trainer's --resume).
        if f"{prefix}length_projection" in state_dict:
            state_dict[f"{prefix}length_projection.weight"] = state_dict.pop(f"{prefix}length_projection")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        if cls.option(config, "projected_length") <= 0:
            raise ValueError(f"`projected_length` must be positive, got {cls.option(config, 'projected_length')}.")
        sharing = cls.option(config, "projection_sharing")
        if sharing not in ("none", "headwise", "key_value", "layerwise"):
            raise ValueError(
                f"`projection_sharing` must be \"none\", \"headwise\", \"key_value\" or \"layerwise\", got {sharing!r}."
            )
        if getattr(config, "is_decoder", False):
            raise ValueError("`is_decoder`: Linformer attention is bidirectional (encoder only); causal use is not supported.")

    def choose_path(self, length, output_attentions, exporting):
        # Under export the projected path serves every length; short sequences are selected per sequence.
        return "dense" if not exporting and length <= self.projected_length else "projected", 1

    def bind_layers(self, mechanisms: list[AttentionMechanism]) -> None:
        if "length_projection" not in self._modules:
            # Held outside the module tree, so the shared projection is stored (and saved) once.
            self.__dict__["projection_owner"] = mechanisms[first_layer_of(self.config, self.attention_type)]

    def borrowed_parameters(self) -> list[nn.Parameter]:
        owner = self.__dict__.get("projection_owner")
        return [] if owner is None else list(owner.length_projection.parameters())  # with any adapter on it

    @property
    def projection(self) -> "LengthProjection":
        """This layer's stacked E/F (the first Linformer layer's for "layerwise" sharing), as it stands in the module
        tree (where peft may have wrapped it)."""
        return self.__dict__.get("projection_owner", self).length_projection

    @torch.no_grad()
    def init_from_dense(self) -> list[str]:
        """Start a model converted from dense weights close to it: each projected row averages a contiguous segment.

        Row i of E and F is the mean of positions [i * max_length // k, (i + 1) * max_length // k),
        so at full length attention runs over segment-pooled keys and values (mean-pooled
        attention). Shorter inputs see only the segments they reach, plus zero rows.
        """
        if "length_projection" not in self._modules:
            return []
        self.length_projection.weight.copy_(segment_means(self.projected_length, self.max_length))
        return ["length_projection.weight"]

    def attention(self, hidden_states, attention_mask, output_attentions, plan, **kwargs):
        length = hidden_states.shape[1]
        if length > self.max_length:
            raise ValueError(
                f"Linformer projections cover {self.max_length} positions (`max_sequence_length`), "
                f"got an input of {length}."
            )
        if kwargs.get("is_causal"):
            raise ValueError("Linformer attention is bidirectional; `is_causal=True` is not supported.")
        if plan.path == "dense":  # the projection (and any adapter on it) still gets a (zero) gradient
            context, weights = self.attend(*self.project_qkv(hidden_states), attention_mask, output_attentions)
            return with_unused(context, [lambda empty: self.projection(empty, False)], hidden_states), weights
        context, weights = self.projected_attention(hidden_states, attention_mask, output_attentions, plan.exporting)
        if plan.exporting:
            return self.select_short(hidden_states, attention_mask, output_attentions, context, weights)
        if torch.compiler.is_compiling():
            # No data-dependent size (nonzero) under torch.compile: every sequence's dense attention over its
            # first k positions, kept with torch.where where the sequence is short (one graph, no break).
            if attention_mask is None:  # longer than k here: every sequence uses the projection
                return context, weights
            return self.select_short(hidden_states, attention_mask, output_attentions, context, weights)
        # Sequences whose real tokens all lie in the first k positions are too short to compress.
        return self.dense_for_short_sequences(
            hidden_states, attention_mask, output_attentions, self.projected_length, context, weights
        )

    def projected_attention(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, output_attentions: bool, exporting: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of every query over the k projected keys and values; padded positions are zeroed first."""
        query = self.split_heads(self.query(hidden_states))
        key, value = self.projected_key_value(hidden_states, attention_mask, exporting)
        return self.attend(query, key, value, None, output_attentions)

    def projected_key_value(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, exporting: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """E[:, :L] @ K and F[:, :L] @ V as [batch, heads, k, head_dim], zero rows for padded positions."""
        mask = None if attention_mask is None else attention_mask[..., None].to(hidden_states.dtype)
        if self.sharing == "none":
            # Per-head matrices: project each head's keys and values, [2h, k, L] @ [b, 2h, L, d] at once.
            key, value = self.key(hidden_states), self.value(hidden_states)
            if mask is not None:
                key, value = key * mask, value * mask
            both = torch.cat([self.split_heads(key), self.split_heads(value)], dim=1)
            return self.projection(both, exporting).chunk(2, dim=1)
        # Matrices shared by the heads: E (W x + b) = W (E x) + (E 1) b, so project the layer input
        # once and run the key/value linears on k rows instead of L. The row sums E 1 (over the real
        # tokens) come from the same product, as one more column.
        columns = torch.cat([hidden_states, torch.ones_like(hidden_states[..., :1])], -1)
        if mask is not None:
            columns = columns * mask
        projected, row_sums = self.projection(columns, exporting).split([hidden_states.shape[-1], 1], -1)
        row_sums = row_sums.squeeze(-1)
        k, rows = self.projected_length, projected.shape[1]  # rows = n * k: E then F, or the one shared matrix
        key_rows, value_rows = slice(0, k), slice(rows - k, rows)
        key = affine(self.key, projected[:, key_rows], row_sums[..., key_rows])
        value = affine(self.value, projected[:, value_rows], row_sums[..., value_rows])
        return self.split_heads(key), self.split_heads(value)

    def select_short(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        context: torch.Tensor,
        weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`dense_for_short_sequences` for torch.export, where no size may depend on the data or the length: every sequence's
        dense attention over its first k positions (of the input padded by k, padding masked), kept where the
        sequence is short. Attention weights then always have k columns."""
        batch, length, _ = hidden_states.shape
        k = self.projected_length
        if attention_mask is None:
            attention_mask = torch.ones(batch, length, dtype=torch.bool, device=hidden_states.device)
        extent = (attention_mask * torch.arange(1, length + 1, device=attention_mask.device)).amax(-1)
        short = (extent <= k).view(batch, 1, 1)
        first = leading(nn.functional.pad(hidden_states, (0, 0, 0, k)), 1, k, True)
        mask = leading(nn.functional.pad(attention_mask, (0, k), value=False), 1, k, True)
        dense_context, dense_weights = self.attend(*self.project_qkv(first), mask, output_attentions)
        context = torch.where(short, leading(nn.functional.pad(dense_context, (0, 0, 0, length)), 1, length, True), context)
        if weights is not None:
            dense_weights = leading(nn.functional.pad(dense_weights, (0, 0, 0, length)), 2, length, True)
            weights = torch.where(short[..., None], dense_weights, weights)
        return context, weights


class LengthProjection(nn.Module):
    """Linformer's stacked length projections E/F, weight [n, k, max_length], as a module of its own, so that an
    adapter can wrap it (peft's `target_parameters=["length_projection.weight"]`) without wrapping the attention.

    The Linformer family saves it under the mechanism's older name (`...attention.self.length_projection`, see
    `LEGACY_KEYS`), so its checkpoints from before and after it became a module read the same.
    """

    def __init__(self, count: int, projected_length: int, max_length: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(count, projected_length, max_length))

    def reset_extra_parameters(self, std: float) -> None:
        # Xavier-like scale rather than `std`: a projected row sums up to max_length keys, and
        # std 1/sqrt(max_length) keeps its scale that of a single key at full length.
        init.normal_(self.weight, std=self.weight.shape[-1] ** -0.5)

    def forward(self, x: torch.Tensor, exporting: bool) -> torch.Tensor:
        """The first L columns of every matrix applied along x's length axis: x [batch, L, d] -> [batch, n * k, d]
        (each matrix on every row's input), x [batch, n, L, d] -> [batch, n, k, d] (matrix i on x[:, i])."""
        weight = leading(gathered(self.weight), -1, x.shape[-2], exporting).to(x.dtype)
        return torch.matmul(weight if x.dim() == 4 else weight.flatten(0, 1), x)


# `from_pretrained` renames the older key to the module's weight, and `save_pretrained` renames it back
# (registered for the Linformer family in modeling_linformer.py).
LEGACY_KEYS = [WeightRenaming(source_patterns=r"attention.self.length_projection(?!\.)",
                              target_patterns="attention.self.length_projection.weight")]


def gathered(parameter: torch.Tensor) -> torch.Tensor:
    """`parameter` itself, or, when it is still sharded by its owner's FSDP2 unit (`fully_shard` on the owning layer,
    which has resharded after its own forward), the whole tensor gathered from the ranks. Its gradient goes back
    reduce-scattered and averaged over the ranks, as FSDP averages the gradients it reduces itself."""
    dtensor = sys.modules.get("torch.distributed.tensor")  # not imported: nothing is sharded
    if dtensor is None or not isinstance(parameter, dtensor.DTensor):
        return parameter
    mesh = parameter.device_mesh
    full = parameter.full_tensor(grad_placements=[dtensor.Partial()] * mesh.ndim)
    if full.requires_grad:
        full.register_hook(lambda grad: grad / mesh.size())
    return full


def leading(x: torch.Tensor, dim: int, count: int, exporting: bool) -> torch.Tensor:
    """The first `count` entries of `x` along `dim`; under export a copy, since a view would need a guard on
    whether it is all of `x` (a size torch.export cannot decide for a dynamic length)."""
    if exporting:
        return x.index_select(dim, torch.arange(count, device=x.device))
    return x.narrow(dim, 0, count)


def affine(linear: nn.Linear, projected: torch.Tensor, row_sums: torch.Tensor) -> torch.Tensor:
    """`linear` applied before the length projection, from the projected input: W (E x) + (E 1) b."""
    output = linear(projected)
    if linear.bias is None:
        return output
    return output + (row_sums - 1).unsqueeze(-1) * linear.bias


def first_layer_of(config, attention_type: str) -> int:
    """Index of the first layer whose mechanism is `attention_type` (it owns parameters shared across layers)."""
    return next(i for i in range(config.num_hidden_layers) if config.attention_type_of_layer(i) == attention_type)


def segment_means(rows: int, length: int) -> torch.Tensor:
    """[rows, length]: row i averages positions [i * length // rows, (i + 1) * length // rows)."""
    positions = torch.arange(length)
    starts = torch.arange(rows)[:, None] * length // rows
    ends = (torch.arange(rows)[:, None] + 1) * length // rows
    member = ((positions >= starts) & (positions < ends)).float()
    return member / member.sum(-1, keepdim=True).clamp(min=1)
