"""Masked-language-model stages: `pretrain` (from scratch, training a tokenizer) and `adapt` (continue on domain text).

Text is packed into full `max_length` sequences and masked by `DataCollatorForLanguageModeling`
(15%); the MLM loss on held-out text of the stage (masks drawn once, from the seed) is measured
before and after training, so every run shows what the stage did.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
from transformers import PreTrainedConfig, PreTrainedTokenizerBase, Trainer, TrainingArguments, set_seed

from ..hub import load_tokenizer
from ..models.families import FAMILIES, check_family
from ..tasks import task_data
from ..tasks.task import model_class
from . import stage
from .corpus import MaskEpochCallback, MLMCollator, mask_once, pack_with_held_out
from .peft_recipe import PeftArguments, check_peft_options, wrap
from .tokenizer import SPECIAL_TOKENS, check_vocab_size, train_tokenizer

SIZES = {
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64},
    "mini": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512},
    "small": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024},
    "base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
}
LONG_INPUT_FAMILIES = ("hfe_longformer",)  # the demo's default when registered
MLM_DEFAULTS = {
    "learning_rate": 5e-4, "weight_decay": 0.01, "warmup_steps": 0.06, "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 8, "num_train_epochs": 1, "logging_steps": 10, "save_steps": 200,
    "save_total_limit": 2, "report_to": "none", "dataloader_pin_memory": torch.cuda.is_available(),
}


def default_model_type() -> str:
    """The Longformer-style family when it is registered, else the dense one."""
    return next((name for name in LONG_INPUT_FAMILIES if name in FAMILIES), "hfe_roberta")


@dataclass
class MLMArguments(stage.OutputArguments, PeftArguments):
    model_name_or_path: str | None = field(default=None, metadata={"help": "checkpoint folder to start from"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder (default: the checkpoint's, or train one)"})
    train_files: list[str] | None = field(default=None, metadata={"help": "local .txt/.jsonl/.csv/.parquet files (default: embedded corpus)"})
    dataset: str = field(default="general", metadata={"help": "embedded corpus when no --train_files: general or domain"})
    text_column: str = field(default="text", metadata={"help": "column holding the text"})
    max_length: int = field(default=1024, metadata={"help": "tokens per packed training sequence"})
    held_out_fraction: float = field(default=0.02, metadata={"help": "documents held out to measure MLM loss"})
    max_held_out_sequences: int = field(default=32, metadata={"help": "at most this many held-out sequences"})
    max_train_documents: int | None = field(default=None, metadata={"help": "use only this many documents (quick runs)"})
    lm_head_steps: int = field(default=0, metadata={"help": "first train only the LM head this many steps, the rest frozen (for a checkpoint without one)"})


@dataclass
class PretrainArguments(MLMArguments):
    model_type: str = field(default_factory=default_model_type, metadata={"help": "family (registered model_type)"})
    size: str = field(default="mini", metadata={"help": f"model size: {', '.join(SIZES)}"})
    config_overrides: str | None = field(default=None, metadata={"help": "config fields, e.g. 'num_hidden_layers=4,attention_window=128' (a dict in Python)"})
    vocab_size: int = field(default=8000, metadata={"help": "size of the BPE vocabulary to train"})


@dataclass
class AdaptArguments(MLMArguments):
    dataset: str = field(default="domain", metadata={"help": "embedded corpus when no --train_files: general or domain"})


def size_fields(size: str) -> dict:
    """The config fields of `--size` `size` (`SIZES`); ValueError naming the sizes."""
    if size not in SIZES:
        raise ValueError(f"unknown --size {size!r}; choose from {sorted(SIZES)}")
    return SIZES[size]


def new_config(args: PretrainArguments, tokenizer: PreTrainedTokenizerBase | None = None) -> PreTrainedConfig:
    """The config of the model `pretrain` builds; ValueError naming the option that cannot work.

    Without `tokenizer`, the vocabulary and special-token ids are those of the tokenizer `pretrain`
    would train, so that every option is checked before the tokenizer is trained.
    """
    stage.check_max_length(args.max_length)
    check_family(args.model_type, "--model_type")
    size = size_fields(args.size)
    config_class = FAMILIES[args.model_type].config_class
    vocabulary = {"vocab_size": args.vocab_size, "pad_token_id": SPECIAL_TOKENS.index("<pad>"),
                  "bos_token_id": SPECIAL_TOKENS.index("<s>"), "eos_token_id": SPECIAL_TOKENS.index("</s>")}
    if tokenizer is not None:
        vocabulary = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
                      "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    elif not args.tokenizer_name:
        check_vocab_size(args.vocab_size)
    overrides = args.config_overrides
    overrides = overrides if isinstance(overrides, dict) else stage.parse_overrides(overrides, "--config_overrides")
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(config_class)})
    if unknown:  # the config would keep them as inert attributes
        raise ValueError(f"--config_overrides: {unknown} are not fields of {config_class.__name__}")
    fields = {**size, **vocabulary, "mlm_loss_chunk_size": 8192, **overrides}
    fields.setdefault("max_position_embeddings", args.max_length + config_class.position_offset_for(**fields))
    return config_class(**fields)


def pretrain(args: PretrainArguments, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """MLM from scratch: train (or load) a tokenizer, build a `args.model_type` model, train it. Returns the results.

    `callbacks` are extra `TrainerCallback`s for the Trainer.
    """
    check_lm_head_steps(args, training_args)
    if not args.model_name_or_path:  # every option checked before the tokenizer is trained
        check_peft_options(args, pretrained=False)
        new_config(args)
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args)
    stage.quiet_progress(training_args)
    corpus = task_data.load_corpus(args.train_files, args.dataset, args.text_column)
    if args.model_name_or_path:  # continue a checkpoint, with its tokenizer
        return run_mlm(args, training_args, "pretrain", corpus, None, checkpoint, callbacks=callbacks)
    output = Path(training_args.output_dir)
    if args.tokenizer_name:
        tokenizer = load_tokenizer(args.tokenizer_name)
    elif args.resume and (output / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(output)
    else:
        with training_args.main_process_first(desc="training the tokenizer"):
            if training_args.process_index == 0:
                print(f"Training a {args.vocab_size}-token byte-level BPE tokenizer on {len(corpus)} documents", flush=True)
                train_tokenizer(corpus[args.text_column], args.vocab_size, args.max_length).save_pretrained(output)
            tokenizer = load_tokenizer(output)
    return run_mlm(args, training_args, "pretrain", corpus, tokenizer, checkpoint, new_config(args, tokenizer), callbacks)


def adapt(args: AdaptArguments, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Domain-adaptive MLM: continue training a checkpoint (with its tokenizer) on domain text."""
    check_lm_head_steps(args, training_args)
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args)
    stage.quiet_progress(training_args)
    corpus = task_data.load_corpus(args.train_files, args.dataset, args.text_column)
    return run_mlm(args, training_args, "adapt", corpus, None, checkpoint, callbacks=callbacks)


def check_lm_head_steps(args: MLMArguments, training_args: TrainingArguments) -> None:
    if args.lm_head_steps < 0 or (args.lm_head_steps and (args.model_name_or_path is None or training_args.deepspeed)):
        raise ValueError(f"--lm_head_steps {args.lm_head_steps}: give 0, or more steps with --model_name_or_path and "
                         "without DeepSpeed (the head of a checkpoint that ships none)")


def run_mlm(args: MLMArguments, training_args: TrainingArguments, name: str, corpus, tokenizer, checkpoint,
            config=None, callbacks: Sequence = ()) -> dict:
    """Check everything, then train `config` from scratch or continue `args.model_name_or_path`."""
    if config is None:
        config = stage.checkpoint_config(args.model_name_or_path, ("ForMaskedLM", "Model"), name)
        tokenizer = tokenizer or load_tokenizer(args.tokenizer_name or args.model_name_or_path)
    stage.check_max_length(args.max_length, config)
    stage.check_tokenizer(tokenizer, config)
    set_seed(training_args.seed)
    mlm_class = model_class(config, "ForMaskedLM")
    model = mlm_class(config) if args.model_name_or_path is None else mlm_class.from_pretrained(args.model_name_or_path)
    model = wrap(model, args, "ForMaskedLM", pretrained=args.model_name_or_path is not None)
    trainer = Trainer(model=model, args=training_args, processing_class=tokenizer, **mlm_inputs(
        task_data.subset(corpus, args.max_train_documents), args.held_out_fraction, args.max_held_out_sequences,
        args.text_column, model, tokenizer, args.max_length, training_args, callbacks))
    head = train_lm_head(trainer, args.lm_head_steps, callbacks) if args.lm_head_steps and checkpoint is None else None
    before = train_with_start_loss(trainer, checkpoint, args.auto_fit_batch)
    after = trainer.evaluate(metric_key_prefix="after")["after_loss"]
    results = {
        "stage": name, "model_type": config.model_type, "source": args.model_name_or_path, "max_length": args.max_length,
        "train_sequences": len(trainer.train_dataset), "held_out_sequences": len(trainer.eval_dataset),
        "mlm_loss_before": before, "mlm_loss_after": after,
        "perplexity_before": stage.safe_exp(before), "perplexity_after": stage.safe_exp(after),
        "num_parameters": model.num_parameters(), "lm_head_steps": 0 if head is None else args.lm_head_steps,
        "mlm_loss_head_start": head,
    }
    if trainer.is_world_process_zero():
        start = f"{head:.3f} -> (LM head alone, {args.lm_head_steps} steps) " if head is not None else ""
        print(f"{name}: held-out MLM loss {start}{before:.3f} -> {after:.3f} after {trainer.state.global_step} steps "
              f"({results['train_sequences']} sequences of {args.max_length} tokens)", flush=True)
    return stage.finish(trainer, results, args.merge)


def train_lm_head(trainer: Trainer, steps: int, callbacks: Sequence = ()) -> float:
    """Train the LM head's own weights alone for `steps` steps (the encoder and the tied word embeddings frozen, at
    the from-scratch rate `MLM_DEFAULTS` sets); returns the held-out loss before them.

    A checkpoint without an MLM head (all-MiniLM-L6-v2 is a bare encoder) gets one at random: trained with the
    encoder from the start, its first gradients are noise that the pretrained encoder follows.
    """
    before = trainer.evaluate(metric_key_prefix="head_start")["head_start_loss"]
    frozen = [p for name, p in trainer.model.named_parameters() if p.requires_grad and "lm_head." not in name]
    for parameter in frozen:
        parameter.requires_grad_(False)
    head_args = copy.copy(trainer.args)
    head_args.max_steps, head_args.learning_rate, head_args.save_strategy = steps, MLM_DEFAULTS["learning_rate"], "no"
    Trainer(model=trainer.model, args=head_args, data_collator=trainer.data_collator, train_dataset=trainer.train_dataset,
            processing_class=trainer.processing_class, callbacks=list(callbacks)).train()
    for parameter in frozen:
        parameter.requires_grad_(True)
    return before


def mlm_inputs(corpus: datasets.Dataset, held_out_fraction: float, max_held_out: int, text_column: str,
               model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, max_length: int,
               training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """The MLM Trainer's data arguments (`pretrain`, `adapt`, `distill --task mlm`): `corpus` packed into training
    sequences, masked anew each epoch, and at most `max_held_out` held-out ones, masked once so that losses before and
    after training compare (`pack_with_held_out`, `MLMCollator`, `mask_once`)."""
    with training_args.main_process_first(desc="packing"):
        train_set, held = pack_with_held_out(corpus, held_out_fraction, training_args.seed, tokenizer,
                                                           max_length, text_column)
    collator = MLMCollator(tokenizer, mlm_probability=0.15, mask_seed=training_args.seed,
                                         pad_to_multiple_of=stage.pad_multiple(model, max_length))
    training_args.remove_unused_columns = False  # the collator needs `example_index` and `special_tokens_mask`
    return {"data_collator": collator, "train_dataset": train_set.add_column("example_index", list(range(len(train_set)))),
            "eval_dataset": mask_once(task_data.subset(held, max_held_out), collator, training_args.seed),
            "callbacks": [MaskEpochCallback(collator), *callbacks]}


def train_with_start_loss(trainer: Trainer, checkpoint: str | None, auto_fit_batch: bool) -> float:
    """`stage.train`, returning the held-out loss of the model the stage started from.

    Under DeepSpeed the Trainer cannot evaluate before it trains (transformers 5.24: ZeRO-1/2 raise, ZeRO-3 then
    trains without an engine; docs/accelerators.md), so the loss comes from its evaluation at the start of training
    (`eval_on_start`), at step 0 of the log history, which a resumed run restores from its checkpoint.
    """
    if not trainer.is_deepspeed_enabled:
        before = trainer.evaluate(metric_key_prefix="before")["before_loss"]
        stage.train(trainer, checkpoint, auto_fit_batch)
        return before
    trainer.args.eval_on_start = True
    stage.train(trainer, checkpoint, auto_fit_batch)
    return next(entry["eval_loss"] for entry in trainer.state.log_history if entry["step"] == 0 and "eval_loss" in entry)
