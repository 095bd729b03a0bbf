"""Model classes of the dense baseline family."""

from .backbone import family_classes
from .configuration_roberta import HfeRobertaConfig

MODEL_CLASSES = family_classes(HfeRobertaConfig, __name__)
(
    HfeRobertaModel,
    HfeRobertaForMaskedLM,
    HfeRobertaForSequenceClassification,
    HfeRobertaForTokenClassification,
    HfeRobertaForQuestionAnswering,
    HfeRobertaForMultipleChoice,
) = MODEL_CLASSES
