"""Model classes of the Reformer-style family."""

from .backbone import family_classes
from .configuration_reformer import HfeReformerConfig

MODEL_CLASSES = family_classes(HfeReformerConfig, __name__)
(
    HfeReformerModel,
    HfeReformerForMaskedLM,
    HfeReformerForSequenceClassification,
    HfeReformerForTokenClassification,
    HfeReformerForQuestionAnswering,
    HfeReformerForMultipleChoice,
) = MODEL_CLASSES
