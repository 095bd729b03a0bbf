"""hf_efficient: efficient-attention RoBERTa-style encoders for Hugging Face Transformers.

Importing the package registers every family with `AutoConfig` and the `AutoModel*` classes
(idempotent), so `AutoModelForMaskedLM.from_pretrained(folder)` works without remote code.
"""

from importlib.metadata import PackageNotFoundError, version

import transformers

from .integrations import register_peft_targets
from .models import (
    modeling_bigbird,
    modeling_blockbert,
    modeling_linformer,
    modeling_longformer,
    modeling_reformer,
    modeling_roberta,
)
from .models.attention import ATTENTION_REGISTRY, AttentionMechanism, register_attention
from .models.configuration_base import HfeConfig
from .models.configuration_bigbird import HfeBigBirdConfig
from .models.configuration_blockbert import HfeBlockBertConfig
from .models.configuration_linformer import HfeLinformerConfig
from .models.configuration_longformer import HfeLongformerConfig
from .models.configuration_reformer import HfeReformerConfig
from .models.configuration_roberta import HfeRobertaConfig
from .models.modeling_bigbird import (
    HfeBigBirdForMaskedLM,
    HfeBigBirdForMultipleChoice,
    HfeBigBirdForQuestionAnswering,
    HfeBigBirdForSequenceClassification,
    HfeBigBirdForTokenClassification,
    HfeBigBirdModel,
)
from .models.modeling_blockbert import (
    HfeBlockBertForMaskedLM,
    HfeBlockBertForMultipleChoice,
    HfeBlockBertForQuestionAnswering,
    HfeBlockBertForSequenceClassification,
    HfeBlockBertForTokenClassification,
    HfeBlockBertModel,
)
from .models.modeling_linformer import (
    HfeLinformerForMaskedLM,
    HfeLinformerForMultipleChoice,
    HfeLinformerForQuestionAnswering,
    HfeLinformerForSequenceClassification,
    HfeLinformerForTokenClassification,
    HfeLinformerModel,
)
from .models.modeling_longformer import (
    HfeLongformerForMaskedLM,
    HfeLongformerForMultipleChoice,
    HfeLongformerForQuestionAnswering,
    HfeLongformerForSequenceClassification,
    HfeLongformerForTokenClassification,
    HfeLongformerModel,
)
from .models.modeling_reformer import (
    HfeReformerForMaskedLM,
    HfeReformerForMultipleChoice,
    HfeReformerForQuestionAnswering,
    HfeReformerForSequenceClassification,
    HfeReformerForTokenClassification,
    HfeReformerModel,
)
from .models.modeling_roberta import (
    HfeRobertaForMaskedLM,
    HfeRobertaForMultipleChoice,
    HfeRobertaForQuestionAnswering,
    HfeRobertaForSequenceClassification,
    HfeRobertaForTokenClassification,
    HfeRobertaModel,
)

try:
    __version__ = version("hf_efficient")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

FAMILY_MODULES = (
    modeling_roberta, modeling_blockbert, modeling_bigbird, modeling_linformer, modeling_reformer, modeling_longformer
)


def family_model_classes() -> dict[str, tuple[type, ...]]:
    """model_type -> that family's model classes (base model first, then the task heads)."""
    return {module.MODEL_CLASSES[0].config_class.model_type: module.MODEL_CLASSES for module in FAMILY_MODULES}


def register_families() -> None:
    """Register every family with the Auto classes and for custom-code saving. Safe to call again."""
    for model_classes in family_model_classes().values():
        config_class = model_classes[0].config_class
        transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for model_class in model_classes:
            getattr(transformers, model_class.auto_class).register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(model_class.auto_class)


register_families()
register_peft_targets()

__all__ = [
    "ATTENTION_REGISTRY",
    "AttentionMechanism",
    "HfeBigBirdConfig",
    "HfeBigBirdForMaskedLM",
    "HfeBigBirdForMultipleChoice",
    "HfeBigBirdForQuestionAnswering",
    "HfeBigBirdForSequenceClassification",
    "HfeBigBirdForTokenClassification",
    "HfeBigBirdModel",
    "HfeBlockBertConfig",
    "HfeBlockBertForMaskedLM",
    "HfeBlockBertForMultipleChoice",
    "HfeBlockBertForQuestionAnswering",
    "HfeBlockBertForSequenceClassification",
    "HfeBlockBertForTokenClassification",
    "HfeBlockBertModel",
    "HfeConfig",
    "HfeLinformerConfig",
    "HfeLinformerForMaskedLM",
    "HfeLinformerForMultipleChoice",
    "HfeLinformerForQuestionAnswering",
    "HfeLinformerForSequenceClassification",
    "HfeLinformerForTokenClassification",
    "HfeLinformerModel",
    "HfeLongformerConfig",
    "HfeLongformerForMaskedLM",
    "HfeLongformerForMultipleChoice",
    "HfeLongformerForQuestionAnswering",
    "HfeLongformerForSequenceClassification",
    "HfeLongformerForTokenClassification",
    "HfeLongformerModel",
    "HfeReformerConfig",
    "HfeReformerForMaskedLM",
    "HfeReformerForMultipleChoice",
    "HfeReformerForQuestionAnswering",
    "HfeReformerForSequenceClassification",
    "HfeReformerForTokenClassification",
    "HfeReformerModel",
    "HfeRobertaConfig",
    "HfeRobertaForMaskedLM",
    "HfeRobertaForMultipleChoice",
    "HfeRobertaForQuestionAnswering",
    "HfeRobertaForSequenceClassification",
    "HfeRobertaForTokenClassification",
    "HfeRobertaModel",
    "family_model_classes",
    "register_families",
    "register_attention",
]
