"""Default targets for the ecosystem libraries that key their defaults by `model_type`.

peft picks LoRA (and IA3, BOFT, VeRA, ...) target modules from tables keyed by `model_type`; it
knows `roberta` but none of our families. Every family keeps RoBERTa's module names
(`attention.self.query`, `attention.self.value`, `output.dense`, ...), so each family gets
RoBERTa's entry of every such table: `get_peft_model(model, LoraConfig(task_type=...))` then works
without naming `target_modules`. Family-specific projections (e.g. `query_global`) are not targets
by default; name them in `target_modules` to adapt them too (the workflow's `--peft_target_modules`
presets do: `hf_efficient.training.peft_recipe`).
"""

from __future__ import annotations

from collections.abc import Iterable

from .models.families import FAMILIES


def register_peft_targets(model_types: Iterable[str] | None = None) -> list[str]:
    """Give every family (or `model_types`) RoBERTa's default peft targets; returns the tables updated.

    Safe to call again and a no-op where peft is not installed. Entries already present are kept.
    """
    try:
        from peft.utils import constants
    except ImportError:
        return []
    if model_types is None:
        model_types = FAMILIES
    updated = []
    for name, table in vars(constants).items():
        if name.startswith("TRANSFORMERS_MODELS_TO_") and isinstance(table, dict) and "roberta" in table:
            for model_type in model_types:
                table.setdefault(model_type, table["roberta"])
            updated.append(name)
    return updated
