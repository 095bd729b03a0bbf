"""hf_efficient: efficient-attention RoBERTa-style encoders for Hugging Face Transformers.

Importing the package imports every `models/modeling_*.py` (each family files its classes in the
catalogue, `models/families.py`) and registers every family with `AutoConfig` and the `AutoModel*`
classes (idempotent), so `AutoModelForMaskedLM.from_pretrained(folder)` works without remote code.
Each family's config and model classes are attributes of the package (`hf_efficient.Hfe<Family>Model`).
It also registers the `extractive-question-answering` pipeline (`pipelines.py`; transformers 5 removed its own).
"""

import importlib
import pkgutil
from importlib.metadata import PackageNotFoundError, version

from transformers.utils.versions import require_version

from . import models
from .integrations import register_peft_targets
from .models.attention import ATTENTION_REGISTRY, AttentionMechanism, register_attention
from .models.configuration_base import HfeConfig
from .models.families import FAMILIES, HEADS, Family, register_families, register_model
from .pipelines import QuestionAnsweringPipeline, register_pipelines

# pip holds setup.cfg's pin; this also covers an install without dependencies beside an image's own transformers
# (TrainingArguments.activation_checkpointing, which the workflow uses, is new in 5.23).
require_version("transformers>=5.23,<6")

try:
    __version__ = version("hf_efficient")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"


def _import_families() -> None:
    """Import every `models/modeling_*.py`: a family files itself in the catalogue where its classes are defined."""
    for module in pkgutil.iter_modules(models.__path__):
        if module.name.startswith("modeling_"):
            importlib.import_module(f"{models.__name__}.{module.name}")


_import_families()
register_families()
register_peft_targets()
register_pipelines()

_FAMILY_CLASSES = {cls.__name__: cls for family in FAMILIES.values() for cls in family.classes}
globals().update(_FAMILY_CLASSES)

__all__ = [
    "ATTENTION_REGISTRY",
    "FAMILIES",
    "HEADS",
    "AttentionMechanism",
    "Family",
    "HfeConfig",
    "QuestionAnsweringPipeline",
    "register_attention",
    "register_families",
    "register_model",
    "register_pipelines",
    *sorted(_FAMILY_CLASSES),
]
