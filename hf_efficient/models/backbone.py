"""The encoder every family shares: RoBERTa's embeddings, layers, pooler and task heads.

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
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import logging

from .attention import ATTENTION_REGISTRY, AttentionPlan, build_attention

# Every mechanism registers itself on import; importing them here makes any config that names a key buildable,
# in the package and in a checkpoint folder loaded with trust_remote_code (which carries the files imported here).
from .attention_bigbird import BigBirdAttention  # noqa: F401
from .attention_blockbert import BlockBertAttention  # noqa: F401
from .attention_chunked_local import ChunkedLocalAttention  # noqa: F401
from .attention_full import FullAttention  # noqa: F401
from .attention_linformer import LinformerAttention  # noqa: F401
from .attention_lsh import LSHAttention  # noqa: F401
from .attention_sliding import SlidingAttention  # noqa: F401
from .configuration_base import HfeConfig
from .reversible import reversible_forward

logger = logging.get_logger(__name__)


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
        if token_type_ids is None:
            token_type_ids = torch.zeros(batch, length, dtype=torch.long, device=inputs_embeds.device)
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
        self, hidden_states: torch.Tensor, attention: AttentionInputs, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        context, weights = self.self_attention(hidden_states, attention, output_attentions)
        attention_output = self.attention.output(context, hidden_states)
        layer_output = chunked_over_length(self.feed_forward, self.chunk_size_feed_forward, attention_output)
        return layer_output, weights

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
        return chunked_over_length(self._feed_forward_branch, self.chunk_size_feed_forward, hidden_states)

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
                hidden_states, weights = layer(hidden_states, attention, output_attentions)
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
                x1, x2 = layers[0]._gradient_checkpointing_func(
                    reversible_forward, x1, x2, layers, False, attention=attention
                )
            else:
                x1, x2 = reversible_forward(x1, x2, layers, memory_saving, attention=attention)
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


class HfePreTrainedModel(PreTrainedModel):
    config_class = HfeConfig
    base_model_prefix = "roberta"
    supports_gradient_checkpointing = True
    # Only the MLM loss averages over `num_items_in_batch`; the Trainer scales the others itself.
    accepts_loss_kwargs = False
    _supports_sdpa = True
    _supports_attention_backend = True
    _no_split_modules = ["HfeEmbeddings", "HfeLayer"]

    def pad_multiple(self, length: int) -> int:
        """The multiple this model pads an input of `length` tokens to internally (1: none), e.g. for a
        collator's `pad_to_multiple_of`: a batch already padded to it spares the model a copy per layer."""
        return math.lcm(*(plan.multiple for plan in self.base_model.encoder.plans(length)))

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
        if isinstance(module, HfeLMHead):
            init.zeros_(module.bias)
        elif isinstance(module, tuple(ATTENTION_REGISTRY.values())):
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
        **attention_inputs,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions | tuple:
        r"""
        attention_inputs: extra per-token inputs of the family's attention (e.g. Longformer-style
            `global_attention_mask`), bool or 0/1 of shape [batch, length]. Anything else is an error.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Specify exactly one of `input_ids` and `inputs_embeds`.")
        unknown = set(attention_inputs) - self.attention_inputs()
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.forward() got unexpected inputs {sorted(unknown)}; "
                f"this model's attention accepts {sorted(self.attention_inputs()) or 'none'}."
            )
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if output_attentions:
            unsupported = {layer.attention.self.attention_type for layer in self.encoder.layer
                           if not layer.attention.self.supports_attention_weights}
            if unsupported:
                raise ValueError(f"`output_attentions=True` is not supported by the {sorted(unsupported)} attention.")

        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        batch, length = hidden_states.shape[:2]
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
        attention = AttentionInputs.prepare(
            self.encoder.plans(length, output_attentions), batch, length, hidden_states.device, attention_mask,
            {name: value.bool() for name, value in attention_inputs.items()},
        )
        sequence_output, all_hidden, all_attentions = self.encoder(
            hidden_states, attention, output_attentions, output_hidden_states
        )
        all_hidden = tuple(all_hidden) if all_hidden is not None else None
        all_attentions = tuple(all_attentions) if all_attentions is not None else None
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        output = BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            hidden_states=all_hidden,
            attentions=all_attentions,
        )
        return output if return_dict else output.to_tuple()


class HfeHeadModel(HfePreTrainedModel):
    """A task head over the shared encoder; returns tuples when `return_dict=False`, like transformers."""

    add_pooling_layer = False

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.roberta = HfeModel(config, add_pooling_layer=self.add_pooling_layer)

    def finish(self, output, return_dict: bool | None):
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    def task_attention_inputs(self, input_ids: torch.Tensor | None, attention_inputs: dict) -> dict:
        """The extra attention inputs of this call: the caller's, which a family's head mixin (see `family_classes`)
        may complete with the task's defaults (e.g. Longformer-style global attention on `<s>`)."""
        return attention_inputs


class HfeLMHead(nn.Module):
    """RoBERTa's MLM head; `decoder.weight` is tied to the word embeddings."""

    def __init__(self, config: HfeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.layer_norm(F.gelu(self.dense(features))))


def chunked_cross_entropy(
    head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor, chunk_size: int, num_items: torch.Tensor | int
) -> torch.Tensor:
    """Mean MLM loss over the labelled positions, never holding more than `chunk_size` rows of logits.

    Each chunk's logits are recomputed in backward (checkpointed), so the [length, vocab] matrix
    never exists, in forward or backward.
    """
    selected = labels != -100
    hidden, labels = hidden[selected], labels[selected]

    def chunk_loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(head(h).float(), y, reduction="sum")

    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk_size):
        end = start + chunk_size
        total = total + checkpoint(chunk_loss, hidden[start:end], labels[start:end], use_reentrant=False)
    return total / num_items


class HfeForMaskedLM(HfeHeadModel):
    auto_class = "AutoModelForMaskedLM"
    accepts_loss_kwargs = True
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.lm_head = HfeLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        **attention_inputs,
    ) -> MaskedLMOutput | tuple:
        r"""
        labels: token ids to predict, -100 where no loss is taken.
        num_items_in_batch: number of labelled tokens across gradient-accumulation steps (passed by the
            Trainer), so that accumulated losses average over tokens exactly.

        In training with `config.mlm_loss_chunk_size > 0` and labels, the loss is computed in chunks
        and `logits` is None.
        """
        outputs = self.roberta(
            return_dict=True, input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, **self.task_attention_inputs(input_ids, attention_inputs),
        )
        hidden = outputs.last_hidden_state
        logits = loss = None
        if labels is not None:
            labels = labels.to(hidden.device)
            num_items = num_items_in_batch if num_items_in_batch is not None else (labels != -100).sum()
        if labels is not None and self.training and self.config.mlm_loss_chunk_size > 0:
            loss = chunked_cross_entropy(self.lm_head, hidden, labels, self.config.mlm_loss_chunk_size, num_items)
        else:
            logits = self.lm_head(hidden)
            if labels is not None:
                loss = F.cross_entropy(
                    logits.view(-1, self.config.vocab_size).float(), labels.view(-1), reduction="sum"
                ) / num_items
        return self.finish(
            MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions),
            return_dict,
        )


class HfeClassificationHead(nn.Module):
    """RoBERTa's sentence-level head, on the `<s>` token or the mean of the real tokens (`config.classifier_pooling`)."""

    def __init__(self, config: HfeConfig):
        super().__init__()
        self.pooling = config.classifier_pooling
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pooling == "cls":
            pooled = features[:, 0]
        elif attention_mask is None:
            pooled = features.mean(1)
        else:
            weights = attention_mask.to(features.dtype).unsqueeze(-1)
            pooled = (features * weights).sum(1) / weights.sum(1).clamp(min=1)
        x = self.dropout(pooled)
        x = self.dropout(torch.tanh(self.dense(x)))
        return self.out_proj(x)


def sequence_classification_loss(config: HfeConfig, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Regression, single- or multi-label loss, chosen as transformers does from `problem_type` or the labels."""
    labels = labels.to(logits.device)
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return F.mse_loss(logits.squeeze(-1) if config.num_labels == 1 else logits, labels.to(logits.dtype))
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, config.num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


class HfeForSequenceClassification(HfeHeadModel):
    auto_class = "AutoModelForSequenceClassification"

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.classifier = HfeClassificationHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> SequenceClassifierOutput | tuple:
        outputs = self.roberta(
            return_dict=True, input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, **self.task_attention_inputs(input_ids, attention_inputs),
        )
        logits = self.classifier(outputs.last_hidden_state, attention_mask)
        loss = sequence_classification_loss(self.config, logits, labels) if labels is not None else None
        return self.finish(
            SequenceClassifierOutput(
                loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
            ),
            return_dict,
        )


class HfeForTokenClassification(HfeHeadModel):
    auto_class = "AutoModelForTokenClassification"

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> TokenClassifierOutput | tuple:
        outputs = self.roberta(
            return_dict=True, input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, **self.task_attention_inputs(input_ids, attention_inputs),
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.to(logits.device).view(-1))
        return self.finish(
            TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions),
            return_dict,
        )


class HfeForQuestionAnswering(HfeHeadModel):
    auto_class = "AutoModelForQuestionAnswering"

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> QuestionAnsweringModelOutput | tuple:
        outputs = self.roberta(
            return_dict=True, input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, **self.task_attention_inputs(input_ids, attention_inputs),
        )
        logits = self.qa_outputs(outputs.last_hidden_state)
        start_logits, end_logits = (x.squeeze(-1).contiguous() for x in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            # Positions outside the input (e.g. truncated answers) are ignored, as in transformers.
            ignored = start_logits.size(1)
            start = start_positions.view(-1).to(start_logits.device).clamp(0, ignored)
            end = end_positions.view(-1).to(end_logits.device).clamp(0, ignored)
            loss = (
                F.cross_entropy(start_logits, start, ignore_index=ignored)
                + F.cross_entropy(end_logits, end, ignore_index=ignored)
            ) / 2
        return self.finish(
            QuestionAnsweringModelOutput(
                loss=loss,
                start_logits=start_logits,
                end_logits=end_logits,
                hidden_states=outputs.hidden_states,
                attentions=outputs.attentions,
            ),
            return_dict,
        )


class HfeForMultipleChoice(HfeHeadModel):
    auto_class = "AutoModelForMultipleChoice"
    add_pooling_layer = True

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> MultipleChoiceModelOutput | tuple:
        r"""Inputs are [batch, num_choices, length] (`inputs_embeds` [batch, num_choices, length, hidden])."""
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]

        def flat(x: torch.Tensor | None, trailing: int = 1) -> torch.Tensor | None:
            return None if x is None else x.reshape(-1, *x.shape[-trailing:])

        outputs = self.roberta(
            return_dict=True, input_ids=flat(input_ids), attention_mask=flat(attention_mask),
            token_type_ids=flat(token_type_ids), position_ids=flat(position_ids), inputs_embeds=flat(inputs_embeds, 2),
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            **self.task_attention_inputs(flat(input_ids), {name: flat(value) for name, value in attention_inputs.items()}),
        )
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)
        loss = F.cross_entropy(logits, labels.to(logits.device)) if labels is not None else None
        return self.finish(
            MultipleChoiceModelOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions),
            return_dict,
        )


TASK_MODELS = (
    HfeModel,
    HfeForMaskedLM,
    HfeForSequenceClassification,
    HfeForTokenClassification,
    HfeForQuestionAnswering,
    HfeForMultipleChoice,
)


def family_classes(
    config_class: type[HfeConfig], module_name: str, head_mixins: dict[type, type] | None = None
) -> tuple[type[HfePreTrainedModel], ...]:
    """A family's model classes, in `TASK_MODELS` order: the shared ones bound to the family's config.

    `module_name` is the family's modeling module, where the classes must be importable by name so
    that `save_pretrained` writes an `auto_map` that loads with `trust_remote_code=True`.
    `head_mixins` maps a shared class to a mixin placed before it, e.g. one overriding
    `task_attention_inputs` to give that head the family's default attention inputs.
    """
    prefix = config_class.__name__.removesuffix("Config")
    head_mixins = head_mixins or {}
    return tuple(
        type(
            base.__name__.replace("Hfe", prefix, 1),
            (head_mixins[base], base) if base in head_mixins else (base,),
            {"config_class": config_class, "__module__": module_name, "__doc__": base.__doc__},
        )
        for base in TASK_MODELS
    )
