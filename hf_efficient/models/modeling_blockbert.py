"""Model classes of the BlockBERT family: the shared encoder and heads, bound to `HfeBlockBertConfig`."""

from .backbone import HfeModel
from .configuration_blockbert import HfeBlockBertConfig
from .families import register_model
from .heads import (
    HfeForMaskedLM,
    HfeForMultipleChoice,
    HfeForQuestionAnswering,
    HfeForSequenceClassification,
    HfeForTokenClassification,
)


@register_model
class HfeBlockBertModel(HfeModel):
    config_class = HfeBlockBertConfig


@register_model
class HfeBlockBertForMaskedLM(HfeForMaskedLM):
    config_class = HfeBlockBertConfig


@register_model
class HfeBlockBertForSequenceClassification(HfeForSequenceClassification):
    config_class = HfeBlockBertConfig


@register_model
class HfeBlockBertForTokenClassification(HfeForTokenClassification):
    config_class = HfeBlockBertConfig


@register_model
class HfeBlockBertForQuestionAnswering(HfeForQuestionAnswering):
    config_class = HfeBlockBertConfig


@register_model
class HfeBlockBertForMultipleChoice(HfeForMultipleChoice):
    config_class = HfeBlockBertConfig
