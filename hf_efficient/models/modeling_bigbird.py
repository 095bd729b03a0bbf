"""Model classes of the BigBird-style family: the shared encoder and heads, bound to `HfeBigBirdConfig`."""

from .backbone import HfeModel
from .configuration_bigbird import HfeBigBirdConfig
from .families import register_model
from .heads import (
    HfeForMaskedLM,
    HfeForMultipleChoice,
    HfeForQuestionAnswering,
    HfeForSequenceClassification,
    HfeForTokenClassification,
)


@register_model
class HfeBigBirdModel(HfeModel):
    config_class = HfeBigBirdConfig


@register_model
class HfeBigBirdForMaskedLM(HfeForMaskedLM):
    config_class = HfeBigBirdConfig


@register_model
class HfeBigBirdForSequenceClassification(HfeForSequenceClassification):
    config_class = HfeBigBirdConfig


@register_model
class HfeBigBirdForTokenClassification(HfeForTokenClassification):
    config_class = HfeBigBirdConfig


@register_model
class HfeBigBirdForQuestionAnswering(HfeForQuestionAnswering):
    config_class = HfeBigBirdConfig


@register_model
class HfeBigBirdForMultipleChoice(HfeForMultipleChoice):
    config_class = HfeBigBirdConfig
