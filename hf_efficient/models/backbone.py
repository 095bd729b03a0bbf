"""The encoder every family shares: RoBERTa's embeddings, layers, encoder and pooler (the task heads are in heads.py).

Module paths mirror `RobertaModel` (`roberta.encoder.layer.N.attention.self.query`), so a RoBERTa
state dict loads by name. A family differs only in the attention mechanism each layer builds from
the registry (`attention.py`) and in the memory options of its config. Layers run on the caller's
length; only each attention call runs on the input padded to the multiple the mechanisms' plans need
(`AttentionInputs`), so every returned tensor is the one in the autograd graph.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions
from transformers.utils import ModelOutput, logging

from .attention import ATTENTION_REGISTRY, AttentionPlan, build_attention, is_exporting

# Every mechanism registers itself on import; importing them here makes any config that names a key buildable,
# in the package and in a checkpoint folder loaded with trust_remote_code (which carries the files imported here).
from .attention_bigbird import BigBirdAttention  # noqa: F401
from .attention_blockbert import BlockBertAttention  # noqa: F401
from .attention_chunked_local import ChunkedLocalAttention  # noqa: F401
from .attention_full import FullAttention  # noqa: F401
from .attention_linformer import LengthProjection, LinformerAttention  # noqa: F401
from .attention_lsh import LSHAttention  # noqa: F401
from .attention_sliding import SlidingAttention  # noqa: F401
from .configuration_base import HfeConfig
from .reversible import reversible_forward

logger = logging.get_logger(__name__)
# transformers' logger of the loading report, which a new task head's line replaces (`_adjust_missing_and_unexpected_keys`)
loading_logger = logging.get_logger("transformers.modeling_utils")
# RoBERTa's task heads, and the pooler that only the bare encoder and multiple choice build: a checkpoint of one task
# loaded for another lacks the new head's keys and holds the old head's, as expected
HEAD_MODULES = ("lm_head", "classifier", "qa_outputs", "pooler")
# Inference on CPU runs in pieces of tokens whose feed-forward activation stays within this (`piece_tokens`): a quarter
# of glibc's largest mmap threshold, so that the piece's other activations stay below it too (dense attention's scores
# over 512-token windows are about four times the feed-forward activation, so at twice this size a piece's pass the
# threshold; the batch-8 inference tables in docs/benchmarks.md are measured at this size)
INFERENCE_PIECE_BYTES = 8 * 2**20


def export_padded_length(length: int, multiple: int) -> int:
    """`length` rounded up to `multiple`, for torch.export: a new symbol n * multiple with n checked at run time.

    Written as (length + padding), the padded length and every size derived from it (block counts,
    views) are expressions torch's symbolic shapes cannot simplify, which fail export with a dynamic
    length; from a new symbol they stay simple, and one program serves every length.
    """
    blocks = torch.scalar_tensor(length, dtype=torch.long).add(multiple - 1).div(multiple, rounding_mode="floor").item()
    torch._check(blocks >= 1)
    torch._check(blocks * multiple >= length)
    torch._check(blocks * multiple < length + multiple)
    return blocks * multiple


def joined(pieces: list):
    """The pieces' outputs as one batch: tensors concatenated along the batch, tuples of them field by field."""
    if isinstance(pieces[0], tuple):
        return tuple(joined(list(field)) for field in zip(*pieces, strict=True))
    return torch.cat(pieces)


def check_indices(name: str, indices: torch.Tensor, table: nn.Embedding, size_name: str) -> None:
    """ValueError naming the input when an index falls outside `table`, where torch raises a bare IndexError
    (and CUDA a device-side assert). One min/max reduction; skipped while tracing for export or compile."""
    if indices.numel() == 0 or is_exporting() or torch.compiler.is_compiling():
        return
    low, high = torch.aminmax(indices)
    if low < 0 or high >= table.num_embeddings:
        raise ValueError(
            f"`{name}` must be in [0, {table.num_embeddings - 1}] ({size_name} is {table.num_embeddings}), "
            f"got values from {low.item()} to {high.item()}."
        )


@dataclass(frozen=True)
class AttentionInputs:
    """The attention side of one forward call: each layer's plan, and the masks padded to the plans' common multiple.

    Layers run on the caller's length; `HfeLayer.self_attention` pads its input by `padding` positions for the
    attention call only and cuts the result back (under export `padding` is symbolic, perhaps 0, and `padded` is True).
    """

    plans: tuple[AttentionPlan, ...]
    padded: bool
    padding: int
    attention_mask: torch.Tensor | None
    extra: dict[str, torch.Tensor]

    @classmethod
    def prepare(
        cls, plans: list[AttentionPlan], batch: int, length: int, device: torch.device,
        attention_mask: torch.Tensor | None, extra: dict[str, torch.Tensor],
    ) -> "AttentionInputs":
        multiple = math.lcm(*(plan.multiple for plan in plans))
        exporting = multiple > 1 and any(plan.exporting for plan in plans)
        # Under export the amount is symbolic (see `export_padded_length`), perhaps 0: pad rather than branch on it.
        padding = export_padded_length(length, multiple) - length if exporting else -length % multiple
        padded = bool(exporting or padding)
        if padded:
            if attention_mask is None:
                attention_mask = torch.ones(batch, length, dtype=torch.bool, device=device)
            attention_mask = F.pad(attention_mask, (0, padding), value=False)
            extra = {name: F.pad(value, (0, padding), value=False) for name, value in extra.items()}
        return cls(tuple(plans), padded, padding, attention_mask, extra)


class HfeEmbeddings(nn.Module):
    def __init__(self, config: HfeConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings,
            config.hidden_size,
            padding_idx=config.pad_token_id if config.position_numbering == "padding_offset" else None,
        )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            check_indices("input_ids", input_ids, self.word_embeddings, "the vocabulary size")
            inputs_embeds = self.word_embeddings(input_ids)
        batch, length = inputs_embeds.shape[:2]
        if length > self.config.max_sequence_length:
            raise ValueError(
                f"Input of {length} tokens is longer than this model supports ({self.config.max_sequence_length}: "
                f"max_position_embeddings={self.config.max_position_embeddings} minus the position offset "
                f"{self.config.position_offset}). Truncate the input, or convert the checkpoint to a longer position "
                "table (`hf-efficient convert --max-length N`)."
            )
        if position_ids is None:
            position_ids = self.position_ids(input_ids, batch, length, inputs_embeds.device)
        else:
            check_indices("position_ids", position_ids, self.position_embeddings, "max_position_embeddings")
        if token_type_ids is None:
            token_type_ids = torch.zeros(batch, length, dtype=torch.long, device=inputs_embeds.device)
        else:
            check_indices("token_type_ids", token_type_ids, self.token_type_embeddings, "type_vocab_size")
        embeddings = inputs_embeds + self.position_embeddings(position_ids) + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))

    def position_ids(self, input_ids: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor:
        offset = self.config.position_offset
        if input_ids is None or self.config.position_numbering == "absolute":
            return torch.arange(offset, offset + length, device=device).expand(batch, length)
        # RoBERTa: real tokens are numbered from pad_token_id + 1, padding keeps the padding position.
        is_token = input_ids.ne(self.config.pad_token_id).int()
        return (torch.cumsum(is_token, dim=1) * is_token).long() + self.config.pad_token_id


class HfeSelfOutput(nn.Module):
    def __init__(self, config: HfeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class HfeAttention(nn.Module):
    def __init__(self, config: HfeConfig, layer_idx: int):
        super().__init__()
        self.self = build_attention(config, layer_idx)
        self.output = HfeSelfOutput(config)


class HfeIntermediate(nn.Module):
    def __init__(self, config: HfeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class HfeOutput(HfeSelfOutput):
    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)


def cpu_inference(module: nn.Module, device: torch.device) -> bool:
    """Whether `module` runs inference on CPU: eval mode, no gradients, eager (not compiled or exported)."""
    inference = not (module.training or torch.is_grad_enabled() or torch.compiler.is_compiling() or is_exporting())
    return inference and device.type == "cpu"


def piece_tokens(intermediate_size: int, dtype: torch.dtype) -> int:
    """The tokens that inference on CPU runs at once: a batch's rows in pieces (`HfeModel.rows_at_once`), a longer
    sequence's feed-forward in chunks of positions (`HfeLayer.feed_forward_chunk`), so that no activation passes
    `INFERENCE_PIECE_BYTES`. glibc's allocator maps every larger tensor afresh and pays a page fault per 4 KiB on its
    first touch (its mmap threshold rises to 32 MiB at most), at every allocation; pieces cost no arithmetic (each
    still a thousand rows or more, up to RoBERTa-large's width). Measured at batch 8 of 4096 tokens (benchmark size,
    one thread): a fifth to two fifths less CPU time for the floor, dense windows, Longformer-style and BlockBERT,
    nearly all of it system time."""
    return max(1, INFERENCE_PIECE_BYTES // (intermediate_size * dtype.itemsize))


def chunked_over_length(function, chunk_size: int, hidden_states: torch.Tensor) -> torch.Tensor:
    """`function` applied to chunks of `chunk_size` positions (any length; 0 = all at once), to bound activation memory."""
    if chunk_size == 0 or hidden_states.shape[1] <= chunk_size:
        return function(hidden_states)
    return torch.cat([function(chunk) for chunk in hidden_states.split(chunk_size, dim=1)], dim=1)


class HfeLayer(GradientCheckpointingLayer):
    """RoBERTa's post-norm layer; in reversible mode its two pre-norm residual branches (F, G)."""

    def __init__(self, config: HfeConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.attention = HfeAttention(config, layer_idx)
        self.intermediate = HfeIntermediate(config)
        self.output = HfeOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention: AttentionInputs,
        reversible_input: torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The residual layer; or, given `reversible_input` (x2, with `hidden_states` as x1), the reversible layer's
        (x1 + F(x2), x2 + G(x1 + F(x2))), for wrappers that must see the call (FSDP2, ZeRO-3, gradient checkpointing;
        see reversible.py). Tensors come positionally, as transformers' `GradientCheckpointingLayer` passes only
        positional arguments through its checkpoint function (keywords are bound to the recomputed call)."""
        if reversible_input is not None:
            x1 = hidden_states + self.attention_branch(reversible_input, attention)
            return x1, reversible_input + self.feed_forward_branch(x1)
        context, weights = self.self_attention(hidden_states, attention, output_attentions)
        attention_output = self.attention.output(context, hidden_states)
        layer_output = chunked_over_length(self.feed_forward, self.feed_forward_chunk(attention_output), attention_output)
        return layer_output, weights

    def feed_forward_chunk(self, hidden_states: torch.Tensor) -> int:
        """Positions the feed-forward reads at once: `chunk_size_feed_forward` when set, else in inference on CPU
        `piece_tokens`, else all (0)."""
        if self.chunk_size_feed_forward or not cpu_inference(self, hidden_states.device):
            return self.chunk_size_feed_forward
        return piece_tokens(self.intermediate.dense.out_features, hidden_states.dtype)

    def feed_forward(self, attention_output: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(attention_output), attention_output)

    def self_attention(
        self, hidden_states: torch.Tensor, attention: AttentionInputs, output_attentions: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The mechanism on `hidden_states` padded as its plan needs; context and weights (queries) cut back to the input."""
        length = hidden_states.shape[1]
        if attention.padded:
            hidden_states = F.pad(hidden_states, (0, 0, 0, attention.padding))
        context, weights = self.attention.self(
            hidden_states, attention.attention_mask, output_attentions, plan=attention.plans[self.layer_idx],
            **attention.extra,
        )
        if not attention.padded:
            return context, weights
        return context[:, :length], None if weights is None else weights[:, :, :length]

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Every trainable parameter the layer computes with, including ones another layer owns."""
        return [p for p in (*self.parameters(), *self.attention.self.borrowed_parameters()) if p.requires_grad]

    def attention_branch(self, hidden_states: torch.Tensor, attention: AttentionInputs) -> torch.Tensor:
        """F of the reversible layer: pre-norm attention without its residual."""
        return self.attention_branch_with_weights(hidden_states, attention, False)[0]

    def attention_branch_with_weights(
        self, hidden_states: torch.Tensor, attention: AttentionInputs, output_attentions: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        output = self.attention.output
        context, weights = self.self_attention(output.LayerNorm(hidden_states), attention, output_attentions)
        return output.dropout(output.dense(context)), weights

    def feed_forward_branch(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """G of the reversible layer: pre-norm feed-forward without its residual, chunked if configured."""
        return chunked_over_length(self._feed_forward_branch, self.feed_forward_chunk(hidden_states), hidden_states)

    def _feed_forward_branch(self, hidden_states: torch.Tensor) -> torch.Tensor:
        output = self.output
        return output.dropout(output.dense(self.intermediate(output.LayerNorm(hidden_states))))


class HfeEncoder(nn.Module):
    def __init__(self, config: HfeConfig):
        super().__init__()
        config.check_fields()  # again: the config may have been edited since it was built
        self.config = config
        self.layer = nn.ModuleList([HfeLayer(config, i) for i in range(config.num_hidden_layers)])
        mechanisms = [layer.attention.self for layer in self.layer]
        for mechanism in mechanisms:
            mechanism.bind_layers(mechanisms)
        # Reversible layers are pre-norm, so their merged streams need a final norm.
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.reversible else None
        # Tests switch this off to compare the memory-saving backward with plain autograd.
        self.memory_saving_backward = True

    def plans(self, length: int, output_attentions: bool = False) -> list[AttentionPlan]:
        """Every layer's attention plan for an input of `length` tokens, asked once per forward."""
        return [layer.attention.self.plan(length, output_attentions) for layer in self.layer]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention: AttentionInputs,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> tuple[torch.Tensor, tuple | None, tuple | None]:
        if self.config.reversible and not output_attentions:
            return self.reversible_forward(hidden_states, attention, output_hidden_states)
        all_hidden = [hidden_states] if output_hidden_states else None
        all_attentions = [] if output_attentions else None
        x1 = x2 = hidden_states
        for layer in self.layer:
            if self.config.reversible:
                f, weights = layer.attention_branch_with_weights(x2, attention, True)
                x1 = x1 + f
                x2 = x2 + layer.feed_forward_branch(x1)
                hidden_states = (x1 + x2) / 2
            else:
                hidden_states, weights = layer(hidden_states, attention, output_attentions=output_attentions)
            if output_hidden_states:
                all_hidden.append(hidden_states)
            if output_attentions:
                all_attentions.append(weights)
        if self.final_layer_norm is not None:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states, all_hidden, all_attentions

    def reversible_forward(self, hidden_states, attention: AttentionInputs, output_hidden_states: bool):
        all_hidden = [hidden_states] if output_hidden_states else None
        x1 = x2 = hidden_states
        memory_saving = (
            self.memory_saving_backward and hidden_states.shape[1] >= self.config.reversible_recompute_min_length
        )
        # Inputs that keep their activations are checkpointed layer by layer when gradient checkpointing is on
        # (longer ones recompute in backward anyway).
        checkpointing = (not memory_saving and self.training and torch.is_grad_enabled()
                         and any(layer.gradient_checkpointing for layer in self.layer))
        # Hidden states per layer need each layer's output, so the stack then runs layer by layer.
        one_by_one = output_hidden_states or checkpointing
        for layers in [[layer] for layer in self.layer] if one_by_one else [list(self.layer)]:
            if checkpointing and layers[0].gradient_checkpointing:
                x1, x2 = layers[0](x1, attention, x2)  # the layer's own checkpointed call (GradientCheckpointingLayer)
            else:
                x1, x2 = reversible_forward(x1, x2, layers, attention, memory_saving)
            if output_hidden_states:
                all_hidden.append((x1 + x2) / 2)
        merged = all_hidden[-1] if output_hidden_states else (x1 + x2) / 2
        return self.final_layer_norm(merged), all_hidden, None


class HfePooler(nn.Module):
    def __init__(self, config: HfeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


# The inputs every model's `forward` takes, in the Google style of the API reference (transformers' wording). Each
# `forward` gets its docstring from `forward_docstring`: these inputs, then its own arguments and what it returns.
FORWARD_INPUTS = """\
    input_ids (torch.LongTensor of shape (batch_size, sequence_length), optional):
        Indices of the input tokens in the vocabulary. Give exactly one of `input_ids` and `inputs_embeds`.
    attention_mask (torch.Tensor of shape (batch_size, sequence_length), optional):
        1 (or `True`) for real tokens, 0 for padding; by default every token is real. Padding never changes
        a sequence's result.
    token_type_ids (torch.LongTensor of shape (batch_size, sequence_length), optional):
        Segment indices, below `config.type_vocab_size` (RoBERTa has one segment: all 0).
    position_ids (torch.LongTensor of shape (batch_size, sequence_length), optional):
        Positions in the position table; by default numbered as `config.position_numbering` says
        (RoBERTa's: from `pad_token_id + 1`, padding at the padding position).
    inputs_embeds (torch.FloatTensor of shape (batch_size, sequence_length, hidden_size), optional):
        Embedded tokens instead of `input_ids`.
    output_attentions (bool, optional):
        Also return every layer's attention weights, in the dense layout `(batch_size, num_heads,
        sequence_length, keys)` with zeros outside the family's pattern (O(length^2) memory: for inspection).
        Defaults to `config.output_attentions`.
    output_hidden_states (bool, optional):
        Also return the hidden states of the embeddings and of every layer. Defaults to
        `config.output_hidden_states`.
    global_attention_mask (torch.Tensor of shape (batch_size, sequence_length), optional):
        Longformer-style models only: 1 (or `True`) for the tokens with global attention, which attend to every
        token and are attended by every token, as in transformers' `LongformerModel`. Without it the
        sequence-classification, question-answering and multiple-choice heads put global attention where
        Longformer does (`<s>`, the question, the choice); the other models use none. The other families'
        global tokens are fixed by their config (BigBird-style: the first and last blocks), so a mask given to
        them is an error.
    return_dict (bool, optional):
        Return a `ModelOutput` (`True`) or a plain tuple. Defaults to `config.return_dict`.
"""


# Last in every `forward`'s arguments: inputs of a registered attention mechanism beyond `global_attention_mask`.
ATTENTION_INPUTS = """\
    **attention_inputs (torch.Tensor):
        Other per-call inputs of the model's attention mechanisms by keyword (`AttentionMechanism.extra_inputs`
        of a registered mechanism), bool or 0/1 of shape `(batch_size, sequence_length)`; the built-in families
        take none. An input the model's attention does not take is an error.
"""


def forward_docstring(summary: str, arguments: str = "", returns: str = ""):
    """Decorator: `forward`'s docstring, from `summary`, the inputs every model takes, the head's own `arguments`
    (Google-style items, indented by 4), the attention's extra inputs and what it `returns`. Only the docstring
    changes."""

    def decorate(forward):
        returned = returns.replace("\n", "\n    ")  # continuation lines indented under the Returns item
        forward.__doc__ = (f"{summary}\n\nArgs:\n{FORWARD_INPUTS}{arguments}{ATTENTION_INPUTS}"
                           f"\nReturns:\n    {returned}\n")
        return forward

    return decorate


class HfePreTrainedModel(PreTrainedModel):
    config_class = HfeConfig
    base_model_prefix = "roberta"
    supports_gradient_checkpointing = True
    # A head whose loss divides by the Trainer's `num_items_in_batch` says so; the Trainer scales the others itself.
    accepts_loss_kwargs = False
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _no_split_modules = ["HfeEmbeddings", "HfeLayer"]

    def returned(self, output: ModelOutput, return_dict: bool | None) -> ModelOutput | tuple:
        """`forward`'s result: `output`, or its tuple with `return_dict=False` (default `config.return_dict`)."""
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()

    def pad_multiple(self, length: int) -> int:
        """The multiple this model pads an input of `length` tokens to internally (1: none), e.g. for a
        collator's `pad_to_multiple_of`: a batch already padded to it spares the model a copy per layer."""
        return math.lcm(*(plan.multiple for plan in self.base_model.encoder.plans(length)))

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' `from_pretrained`; with `output_loading_info=True`, the new and unused head keys that the
        loading report says in one line are listed too (missing and unexpected), as transformers' models list them."""
        loaded = super().from_pretrained(*args, **kwargs)
        model, loading_info = loaded if kwargs.get("output_loading_info") else (loaded, None)
        new, unused = model.__dict__.pop("_heads_said", ((), ()))
        if loading_info is None:
            return model
        loading_info["missing_keys"] = type(loading_info["missing_keys"])([*loading_info["missing_keys"], *new])
        loading_info["unexpected_keys"] = type(loading_info["unexpected_keys"])([*loading_info["unexpected_keys"], *unused])
        return model, loading_info

    def _adjust_missing_and_unexpected_keys(self, loading_info) -> None:
        """transformers' clean-up of the keys that `from_pretrained`'s loading report lists, then a new task head (its
        keys missing) and another task's head in the checkpoint (its keys unexpected) said in one line instead of the
        report's table, which keeps every other key (`from_pretrained`'s `output_loading_info` lists them all)."""
        super()._adjust_missing_and_unexpected_keys(loading_info)

        def of_head(key: str) -> bool:
            return key.removeprefix(f"{self.base_model_prefix}.").split(".")[0] in HEAD_MODULES

        new = sorted(key for key in loading_info.missing_keys if of_head(key))
        unused = sorted(key for key in loading_info.unexpected_keys if of_head(key))
        if not new and not unused:
            return
        loading_info.missing_keys -= set(new)
        loading_info.unexpected_keys -= set(unused)
        self.__dict__["_heads_said"] = new, unused  # for `from_pretrained`'s `output_loading_info`
        def modules(keys: list[str]) -> str:
            return ", ".join(dict.fromkeys(key.rsplit(".", 1)[0] for key in keys))

        said = [f"head {modules(new)} is new, initialised at random (train it on your task)"] if new else []
        said += [f"the checkpoint's {modules(unused)} (another task's head) is not loaded"] if unused else []
        loading_logger.warning(f"{type(self).__name__} from {self.name_or_path}: {'; '.join(said)}")

    def own_class(self) -> type["HfePreTrainedModel"]:
        """The model's class, behind the subclass that FSDP2's `fully_shard` (and `replicate`) swaps in, which
        torch defines (`_fsdp_init.FSDPHfeRobertaForMaskedLM`)."""
        if not torch.distributed.is_available():
            return type(self)
        from torch.distributed.fsdp import FSDPModule

        return next(cls for cls in type(self).__mro__ if not issubclass(cls, FSDPModule))

    def save_pretrained(self, *args, **kwargs) -> None:
        """Saves as the model's own class. transformers' `custom_object_save` writes the `auto_map` entry and copies
        the remote code from the instance's class's module and name: for an FSDP2 model, torch's `_fsdp_*.py`, which
        no Python without `hf_efficient` could load the model from (docs/accelerators.md)."""
        wrapper, own = type(self), self.own_class()
        if wrapper is own:
            super().save_pretrained(*args, **kwargs)
            return
        names = wrapper.__module__, wrapper.__name__
        wrapper.__module__, wrapper.__name__ = own.__module__, own.__name__  # for this save only
        try:
            super().save_pretrained(*args, **kwargs)
        finally:
            wrapper.__module__, wrapper.__name__ = names

    def _set_gradient_checkpointing(self, enable: bool = True, **kwargs) -> None:
        super()._set_gradient_checkpointing(enable, **kwargs)
        if enable and self.config.reversible:
            logger.info(
                "Reversible layers recompute their activations in backward for inputs of at least "
                f"`reversible_recompute_min_length`={self.config.reversible_recompute_min_length} tokens; gradient "
                "checkpointing applies, layer by layer, to the shorter inputs, which otherwise keep their activations."
            )

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, (*ATTENTION_REGISTRY.values(), LengthProjection)):
            module.reset_extra_parameters(self.config.initializer_range)


class HfeModel(HfePreTrainedModel):
    """The bare encoder (RoBERTa's `RobertaModel`)."""

    auto_class = "AutoModel"

    def __init__(self, config: HfeConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = HfeEmbeddings(config)
        self.encoder = HfeEncoder(config)
        self.pooler = HfePooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def attention_inputs(self) -> set[str]:
        """Names of the extra per-call inputs this model's attention mechanisms accept."""
        return {name for layer in self.encoder.layer for name in layer.attention.self.extra_inputs}

    @forward_docstring(
        "Encode a batch: the last layer's hidden states, and the pooled `<s>` state when the model has a pooler.",
        returns="""`BaseModelOutputWithPoolingAndCrossAttentions` (a tuple with `return_dict=False`): `last_hidden_state`
    `(batch_size, sequence_length, hidden_size)`; `pooler_output` `(batch_size, hidden_size)` (`None` without
    a pooler); `hidden_states` and `attentions` when requested.""",
    )
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **attention_inputs,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions | tuple:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Specify exactly one of `input_ids` and `inputs_embeds`.")
        if global_attention_mask is not None:  # one of the attention's inputs, named for the users of Longformer
            attention_inputs["global_attention_mask"] = global_attention_mask
        unknown = set(attention_inputs) - self.attention_inputs()
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.forward() got unexpected inputs {sorted(unknown)}; "
                f"this model's attention accepts {sorted(self.attention_inputs()) or 'none'}."
            )
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        if output_attentions:
            unsupported = {layer.attention.self.attention_type for layer in self.encoder.layer
                           if not layer.attention.self.supports_attention_weights}
            if unsupported:
                raise ValueError(f"`output_attentions=True` is not supported by the {sorted(unsupported)} attention.")

        tokens = input_ids if input_ids is not None else inputs_embeds
        batch, length = tokens.shape[:2]
        if attention_mask is not None:
            if attention_mask.shape != (batch, length):
                raise ValueError(f"`attention_mask` must have shape {(batch, length)}, got {tuple(attention_mask.shape)}.")
            attention_mask = attention_mask.bool()
        attention_inputs = {name: value for name, value in attention_inputs.items() if value is not None}
        for name, value in attention_inputs.items():
            if value.shape != (batch, length):
                raise ValueError(
                    f"`{name}` must have shape {(batch, length)} (batch, length: one entry per input token), "
                    f"got {tuple(value.shape)}."
                )
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                  "position_ids": position_ids, "inputs_embeds": inputs_embeds,
                  **{name: value.bool() for name, value in attention_inputs.items()}}
        rows = self.rows_at_once(batch, length, tokens.device)
        pieces = [
            self.encode(output_attentions, output_hidden_states, **{
                name: value[start : start + rows] if value is not None and value.shape[0] == batch else value
                for name, value in inputs.items()
            })
            for start in range(0, batch, rows)
        ]
        output = pieces[0] if len(pieces) == 1 else BaseModelOutputWithPoolingAndCrossAttentions(
            **{name: joined([piece[name] for piece in pieces]) for name in pieces[0]}
        )
        return self.returned(output, return_dict)

    def rows_at_once(self, batch: int, length: int, device: torch.device) -> int:
        """How many rows of a batch run through the encoder together: all, except in inference on CPU, where pieces
        of `piece_tokens` tokens (at least one row) run in turn."""
        if not cpu_inference(self, device):
            return batch
        return max(1, min(batch, piece_tokens(self.config.intermediate_size, self.dtype) // length))

    def encode(
        self, output_attentions: bool, output_hidden_states: bool, input_ids, attention_mask, token_type_ids,
        position_ids, inputs_embeds, **attention_inputs,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        """The forward of checked inputs (`forward`'s, the masks as bool): embeddings, encoder, pooler."""
        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        batch, length = hidden_states.shape[:2]
        attention = AttentionInputs.prepare(
            self.encoder.plans(length, output_attentions), batch, length, hidden_states.device, attention_mask,
            attention_inputs,
        )
        sequence_output, all_hidden, all_attentions = self.encoder(
            hidden_states, attention, output_attentions, output_hidden_states
        )
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=sequence_output,
            pooler_output=self.pooler(sequence_output) if self.pooler is not None else None,
            hidden_states=tuple(all_hidden) if all_hidden is not None else None,
            attentions=tuple(all_attentions) if all_attentions is not None else None,
        )
