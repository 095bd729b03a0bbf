"""Model classes of the Linformer family."""

from .backbone import family_classes
from .configuration_linformer import HfeLinformerConfig

MODEL_CLASSES = family_classes(HfeLinformerConfig, __name__)
(
    HfeLinformerModel,
    HfeLinformerForMaskedLM,
    HfeLinformerForSequenceClassification,
    HfeLinformerForTokenClassification,
    HfeLinformerForQuestionAnswering,
    HfeLinformerForMultipleChoice,
) = MODEL_CLASSES
