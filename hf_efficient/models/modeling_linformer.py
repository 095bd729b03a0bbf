"""Model classes of the Linformer family: the shared encoder and heads, bound to `HfeLinformerConfig`."""

from transformers.conversion_mapping import register_checkpoint_conversion_mapping

from .attention_linformer import LEGACY_KEYS
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

# The family's checkpoints hold the length projections under their older key: `from_pretrained` renames it to the
# module's, `save_pretrained` back. Declared for this family only, as transformers checks that every declared
# renaming matches the keys a model saves (another family that mixes in Linformer layers saves the module's key).
register_checkpoint_conversion_mapping(HfeLinformerConfig.model_type, LEGACY_KEYS, overwrite=True)


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
