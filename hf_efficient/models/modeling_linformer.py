"""Model classes of the Linformer family: the shared encoder and heads, bound to `HfeLinformerConfig`."""

from .backbone import HfeModel
from .configuration_linformer import HfeLinformerConfig
from .families import register_model
from .heads import (
    HfeForMaskedLM,
    HfeForMultipleChoice,
    HfeForQuestionAnswering,
    HfeForSequenceClassification,
    HfeForTokenClassification,
)


@register_model
class HfeLinformerModel(HfeModel):
    config_class = HfeLinformerConfig


@register_model
class HfeLinformerForMaskedLM(HfeForMaskedLM):
    config_class = HfeLinformerConfig


@register_model
class HfeLinformerForSequenceClassification(HfeForSequenceClassification):
    config_class = HfeLinformerConfig


@register_model
class HfeLinformerForTokenClassification(HfeForTokenClassification):
    config_class = HfeLinformerConfig


@register_model
class HfeLinformerForQuestionAnswering(HfeForQuestionAnswering):
    config_class = HfeLinformerConfig


@register_model
class HfeLinformerForMultipleChoice(HfeForMultipleChoice):
    config_class = HfeLinformerConfig
