"""Model classes of the Reformer-style family: the shared encoder and heads, bound to `HfeReformerConfig`."""

from .backbone import HfeModel
from .configuration_reformer import HfeReformerConfig
from .families import register_model
from .heads import (
    HfeForMaskedLM,
    HfeForMultipleChoice,
    HfeForQuestionAnswering,
    HfeForSequenceClassification,
    HfeForTokenClassification,
)


@register_model
class HfeReformerModel(HfeModel):
    config_class = HfeReformerConfig


@register_model
class HfeReformerForMaskedLM(HfeForMaskedLM):
    config_class = HfeReformerConfig


@register_model
class HfeReformerForSequenceClassification(HfeForSequenceClassification):
    config_class = HfeReformerConfig


@register_model
class HfeReformerForTokenClassification(HfeForTokenClassification):
    config_class = HfeReformerConfig


@register_model
class HfeReformerForQuestionAnswering(HfeForQuestionAnswering):
    config_class = HfeReformerConfig


@register_model
class HfeReformerForMultipleChoice(HfeForMultipleChoice):
    config_class = HfeReformerConfig
