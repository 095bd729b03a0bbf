"""Model classes of the Longformer-style family; its heads put global attention where transformers' Longformer does."""

import torch

from .backbone import HfeModel
from .configuration_longformer import HfeLongformerConfig
from .families import register_model
from .heads import (
    HfeForMaskedLM,
    HfeForMultipleChoice,
    HfeForQuestionAnswering,
    HfeForSequenceClassification,
    HfeForTokenClassification,
)


class DefaultGlobalAttention:
    """Head mixin: when the caller gives no `global_attention_mask`, use the task's default (needs `input_ids`)."""

    def task_attention_inputs(self, input_ids: torch.Tensor | None, attention_inputs: dict) -> dict:
        if attention_inputs.get("global_attention_mask") is not None or input_ids is None:
            return attention_inputs
        return {**attention_inputs, "global_attention_mask": self.default_global_attention(input_ids)}

    def separator_split(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's position minus the first separator's [batch, length], and whether the row has one [batch, 1]."""
        is_sep = input_ids == self.config.sep_token_id
        position = torch.arange(input_ids.shape[-1], device=input_ids.device)
        return position - is_sep.int().argmax(-1, keepdim=True), is_sep.any(-1, keepdim=True)


class GlobalOnFirstToken(DefaultGlobalAttention):
    """Sequence classification: global attention on `<s>`."""

    def default_global_attention(self, input_ids: torch.Tensor) -> torch.Tensor:
        return (torch.arange(input_ids.shape[-1], device=input_ids.device) == 0).expand(input_ids.shape)


class GlobalOnQuestion(DefaultGlobalAttention):
    """Question answering: global attention on the question, the tokens before the first separator (none without one)."""

    def default_global_attention(self, input_ids: torch.Tensor) -> torch.Tensor:
        after_sep, has_sep = self.separator_split(input_ids)
        return (after_sep < 0) & has_sep


class GlobalOnChoice(DefaultGlobalAttention):
    """Multiple choice, per choice: global attention after the first separator pair (`<s> context </s></s> choice </s>`),
    as transformers' `LongformerForMultipleChoice`, padding excluded (none without a separator)."""

    def default_global_attention(self, input_ids: torch.Tensor) -> torch.Tensor:
        after_sep, has_sep = self.separator_split(input_ids)
        return (after_sep > 1) & has_sep & (input_ids != self.config.pad_token_id)


@register_model
class HfeLongformerModel(HfeModel):
    config_class = HfeLongformerConfig


@register_model
class HfeLongformerForMaskedLM(HfeForMaskedLM):
    config_class = HfeLongformerConfig


@register_model
class HfeLongformerForSequenceClassification(GlobalOnFirstToken, HfeForSequenceClassification):
    config_class = HfeLongformerConfig


@register_model
class HfeLongformerForTokenClassification(HfeForTokenClassification):
    config_class = HfeLongformerConfig


@register_model
class HfeLongformerForQuestionAnswering(GlobalOnQuestion, HfeForQuestionAnswering):
    config_class = HfeLongformerConfig


@register_model
class HfeLongformerForMultipleChoice(GlobalOnChoice, HfeForMultipleChoice):
    config_class = HfeLongformerConfig
