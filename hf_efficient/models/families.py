"""The family catalogue: model_type -> the family's config class and its model class for every task head.

A family joins where it is defined: each model class in `modeling_<family>.py` is decorated with
`@register_model`, which files it under its config's `model_type` and the head its `auto_class`
names. `HEADS` is the one table of task heads that conversion, the workflow and the tests index by.
"""

import difflib
import string
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


# What each head adds to the encoder: the opening of every family's model class docstring (`_model_docstring`).
HEAD_SUMMARIES = {
    "Model": "The bare encoder, returning its hidden states (as RoBERTa's `RobertaModel`).",
    "ForMaskedLM": "The encoder with a masked-language-modelling head (as RoBERTa's `RobertaForMaskedLM`): the "
                   "pretraining and domain-adaptation model.",
    "ForSequenceClassification": "The encoder with a sequence classification or regression head (as RoBERTa's "
                                 "`RobertaForSequenceClassification`), over `<s>` or the mean of the real tokens "
                                 "(`config.classifier_pooling`).",
    "ForTokenClassification": "The encoder with a linear layer over every token's hidden state, for named-entity "
                              "recognition and other tagging (as RoBERTa's `RobertaForTokenClassification`).",
    "ForQuestionAnswering": "The encoder with a span head for extractive question answering: start and end logits "
                            "over the tokens (as RoBERTa's `RobertaForQuestionAnswering`).",
    "ForMultipleChoice": "The encoder with a multiple-choice head: one score per choice, from the pooled `<s>` state "
                         "(as RoBERTa's `RobertaForMultipleChoice`).",
}


# Every model class's example (`_model_docstring`): a tiny model from a tokenizer that ships with the dev extra, then
# what its head is for; `$config` and `$model` name the family's classes. tests/test_api_examples.py runs them all.
EXAMPLE_SETUP = """\
A tiny model with random weights, so that the example runs offline in a second (its outputs are any token, label
or span); a trained model loads with `$model.from_pretrained(folder)`. The tokenizer is all-MiniLM-L6-v2's
(BERT's vocabulary), which the dev extra installs; any BERT or RoBERTa tokenizer works with a config that matches
its vocabulary and special tokens.

>>> import torch
>>> from transformers import AutoTokenizer
>>> from hf_efficient import $config, $model
>>> from hf_efficient.training.long_context import minilm_folder
>>> tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
>>> config = $config(
...     vocab_size=tokenizer.vocab_size, type_vocab_size=2,
...     pad_token_id=tokenizer.pad_token_id, sep_token_id=tokenizer.sep_token_id,
...     hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
... )
>>> model = $model(config).eval()
"""

HEAD_EXAMPLES = {
    "Model": """\
>>> inputs = tokenizer("Long documents, read in one pass.", return_tensors="pt")
>>> with torch.no_grad():
...     outputs = model(**inputs)
>>> outputs.last_hidden_state.shape  # (batch_size, sequence_length, hidden_size)
torch.Size([1, 10, 32])
""",
    "ForMaskedLM": """\
>>> inputs = tokenizer("Replace the [MASK] before the warranty ends.", return_tensors="pt")
>>> with torch.no_grad():
...     logits = model(**inputs).logits
>>> masked = inputs.input_ids[0] == tokenizer.mask_token_id
>>> tokenizer.decode(logits[0, masked].argmax(-1))  # the predicted word
'...'
""",
    "ForSequenceClassification": """\
>>> inputs = tokenizer("The parcel arrived a week late and the box was damaged.", return_tensors="pt")
>>> with torch.no_grad():
...     logits = model(**inputs).logits
>>> logits.shape  # (batch_size, config.num_labels)
torch.Size([1, 2])
>>> model.config.id2label[logits.argmax(-1).item()]
'LABEL_...'
""",
    "ForTokenClassification": """\
>>> inputs = tokenizer("Ada Lovelace wrote the notes in London.", return_tensors="pt")
>>> with torch.no_grad():
...     logits = model(**inputs).logits
>>> logits.shape  # (batch_size, sequence_length, config.num_labels)
torch.Size([1, 11, 2])
>>> labels = [model.config.id2label[label] for label in logits.argmax(-1)[0].tolist()]  # one per token
>>> labels[:3]
['LABEL_...', 'LABEL_...', 'LABEL_...']
""",
    "ForQuestionAnswering": """\
>>> question, context = "Who wrote the notes?", "Ada Lovelace wrote the notes in 1843."
>>> inputs = tokenizer(question, context, return_tensors="pt")
>>> with torch.no_grad():
...     outputs = model(**inputs)
>>> start = outputs.start_logits.argmax(-1).item()
>>> end = start + outputs.end_logits[0, start:].argmax(-1).item()
>>> tokenizer.decode(inputs.input_ids[0, start : end + 1])  # the answer's tokens
'...'

The pipeline reads a long context in windows and answers with the best span of any of them, its characters in
the context:

>>> from transformers import pipeline
>>> qa = pipeline("extractive-question-answering", model=model, tokenizer=tokenizer)
>>> answer = qa(question=question, context=context)
>>> sorted(answer), answer["answer"] in context
(['answer', 'end', 'score', 'start'], True)
""",
    "ForMultipleChoice": """\
>>> prompt, choices = "The parcel arrived", ["on time.", "a week late."]
>>> inputs = tokenizer([prompt] * len(choices), choices, return_tensors="pt", padding=True)
>>> with torch.no_grad():  # inputs of shape (batch_size, num_choices, sequence_length)
...     logits = model(**{name: value.unsqueeze(0) for name, value in inputs.items()}).logits
>>> logits.shape  # (batch_size, num_choices)
torch.Size([1, 2])
""",
}


def model_example(model_class: type, config_class: type, head: str) -> str:
    """The runnable example of `model_class` (a doctest): `EXAMPLE_SETUP`, then its head's `HEAD_EXAMPLES` entry."""
    names = {"config": config_class.__name__, "model": model_class.__name__}
    return string.Template(f"{EXAMPLE_SETUP}{HEAD_EXAMPLES[head]}").substitute(names)


def _model_docstring(model_class: type, config_class: type, head: str) -> str:
    """The docstring of a family's model class: what its head does, what a head mixin adds, its `config` and its
    example."""
    mixins = [base for base in model_class.__bases__
              if not issubclass(base, transformers.PreTrainedModel) and base.__doc__]
    defaults = "".join(f"\n\nDefault `global_attention_mask`, when a call gives none. {base.__doc__.strip()}"
                       for base in mixins)
    example = model_example(model_class, config_class, head).replace("\n", "\n    ").replace("\n    \n", "\n\n")
    return (
        f"`{config_class.model_type}`: {HEAD_SUMMARIES[head]}{defaults}\n\n"
        f"Every family has the same model classes; this one computes the attention `{config_class.__name__}` "
        f"describes. Load trained weights with `from_pretrained`, or build one from a config (random weights); "
        f"call it as any PyTorch module (`forward` below).\n\n"
        f"Args:\n    config ({config_class.__name__}): The model's configuration.\n\n"
        f"Examples:\n    {example}"
    )


def register_model(model_class: type[transformers.PreTrainedModel]) -> type[transformers.PreTrainedModel]:
    """Class decorator: file `model_class` in the catalogue under its `config_class` and its head (`auto_class`).

    A class without a docstring of its own gets `_model_docstring`'s, so every family documents the same way.
    """
    config_class = model_class.config_class
    head = {auto_class: head for head, auto_class in HEADS.items()}[model_class.auto_class]
    if not model_class.__dict__.get("__doc__"):
        model_class.__doc__ = _model_docstring(model_class, config_class, head)
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
