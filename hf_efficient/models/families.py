"""The family catalogue: model_type -> the family's config class and its model class for every task head.

A family joins where it is defined: each model class in `modeling_<family>.py` is decorated with
`@register_model`, which files it under its config's `model_type` and the head its `auto_class`
names. `HEADS` is the one table of task heads that conversion, the workflow and the tests index by.
"""

import difflib
from dataclasses import dataclass, field

import transformers

# Task head (the suffix of a model class name) -> the Auto class that loads it.
HEADS = {
    "Model": "AutoModel",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForQuestionAnswering": "AutoModelForQuestionAnswering",
    "ForMultipleChoice": "AutoModelForMultipleChoice",
}


@dataclass
class Family:
    """One family: its config class and its model class per head (keys of `HEADS`)."""

    config_class: type[transformers.PreTrainedConfig]
    models: dict[str, type[transformers.PreTrainedModel]] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return self.config_class.model_type

    @property
    def classes(self) -> tuple[type, ...]:
        """The config class, then the model classes in `HEADS` order."""
        return (self.config_class, *(self.models[head] for head in HEADS if head in self.models))


FAMILIES: dict[str, Family] = {}


def check_family(model_type: str, option: str) -> None:
    """ValueError for a `model_type` that is not registered, naming `option`, the closest family and all of them."""
    if model_type not in FAMILIES:
        close = difflib.get_close_matches(model_type, FAMILIES, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ValueError(f"unknown {option} {model_type!r}{hint} (registered: {', '.join(sorted(FAMILIES))})")


def register_model(model_class: type[transformers.PreTrainedModel]) -> type[transformers.PreTrainedModel]:
    """Class decorator: file `model_class` in the catalogue under its `config_class` and its head (`auto_class`)."""
    config_class = model_class.config_class
    head = {auto_class: head for head, auto_class in HEADS.items()}[model_class.auto_class]
    family = FAMILIES.setdefault(config_class.model_type, Family(config_class))
    if family.config_class is not config_class:
        raise ValueError(f"model_type {config_class.model_type!r} is already taken by {family.config_class.__name__}.")
    family.models[head] = model_class
    return model_class


def register_families() -> None:
    """Register every catalogued family with `AutoConfig`, the `AutoModel*` classes and for custom-code saving.

    Safe to call again. A family missing a head is an error: every family serves every task.
    """
    for family in FAMILIES.values():
        missing = [head for head in HEADS if head not in family.models]
        if missing:
            raise ValueError(f"family {family.model_type!r} has no model class for {missing}.")
        transformers.AutoConfig.register(family.model_type, family.config_class, exist_ok=True)
        family.config_class.register_for_auto_class()
        for head, model_class in family.models.items():
            getattr(transformers, HEADS[head]).register(family.config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(HEADS[head])
