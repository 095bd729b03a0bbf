"""Model classes of the BlockBERT family."""

from .backbone import family_classes
from .configuration_blockbert import HfeBlockBertConfig

MODEL_CLASSES = family_classes(HfeBlockBertConfig, __name__)
(
    HfeBlockBertModel,
    HfeBlockBertForMaskedLM,
    HfeBlockBertForSequenceClassification,
    HfeBlockBertForTokenClassification,
    HfeBlockBertForQuestionAnswering,
    HfeBlockBertForMultipleChoice,
) = MODEL_CLASSES
