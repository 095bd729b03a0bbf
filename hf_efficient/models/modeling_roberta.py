"""Model classes of the dense baseline family: the shared encoder and heads, bound to `HfeRobertaConfig`."""

from .backbone import HfeModel
from .configuration_roberta import HfeRobertaConfig
from .families import register_model
from .heads import (
    HfeForMaskedLM,
    HfeForMultipleChoice,
    HfeForQuestionAnswering,
    HfeForSequenceClassification,
    HfeForTokenClassification,
)


@register_model
class HfeRobertaModel(HfeModel):
    config_class = HfeRobertaConfig


@register_model
class HfeRobertaForMaskedLM(HfeForMaskedLM):
    config_class = HfeRobertaConfig


@register_model
class HfeRobertaForSequenceClassification(HfeForSequenceClassification):
    config_class = HfeRobertaConfig


@register_model
class HfeRobertaForTokenClassification(HfeForTokenClassification):
    config_class = HfeRobertaConfig


@register_model
class HfeRobertaForQuestionAnswering(HfeForQuestionAnswering):
    config_class = HfeRobertaConfig


@register_model
class HfeRobertaForMultipleChoice(HfeForMultipleChoice):
    config_class = HfeRobertaConfig
