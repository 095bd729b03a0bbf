"""Model classes of the BigBird-style family."""

from .backbone import family_classes
from .configuration_bigbird import HfeBigBirdConfig

MODEL_CLASSES = family_classes(HfeBigBirdConfig, __name__)
(
    HfeBigBirdModel,
    HfeBigBirdForMaskedLM,
    HfeBigBirdForSequenceClassification,
    HfeBigBirdForTokenClassification,
    HfeBigBirdForQuestionAnswering,
    HfeBigBirdForMultipleChoice,
) = MODEL_CLASSES
