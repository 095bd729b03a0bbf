"""Convert a RoBERTa or BERT checkpoint into any registered family, with a longer position table.

Longformer's recipe (Beltagy et al. 2020, section 5): keep every pretrained weight, extend the
position table to the new length by copying the pretrained positions in tiles, and let a short
continued-MLM pretraining (`hf-efficient adapt`) adapt the model to the new attention and length.
`positions="interpolate"` stretches the pretrained table over the new length instead (neighbouring
positions stay neighbours, at a finer spacing), the alternative that bench-quality's ablations compare.

The key mapping is strict: every source tensor is either loaded into the target or reported as
dropped with a reason; a target parameter with no source is an error unless the family's attention
mechanism initialises it (`init_from_dense`, below); every shape is checked.

Family hook: after the dense weights are loaded, every attention mechanism that has a method
`init_from_dense(self)` is called (under `torch.no_grad()`). It initialises the mechanism's own extra
parameters from the dense ones (e.g. Longformer's `query_global` from `query`, Linformer's length
projections close to the identity) and returns the names, relative to the mechanism, of the
parameters it set; returning None means "every parameter of mine the checkpoint did not provide".
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from torch import nn

from .hub import check_files, load_tokenizer, save_checkpoint
from .models.attention import AttentionMechanism
from .models.families import FAMILIES, HEADS, check_family

# Source model_type -> the prefix its backbone weights carry in a checkpoint with a head.
SOURCE_PREFIXES = {"roberta": "roberta", "xlm-roberta": "roberta", "camembert": "roberta", "bert": "bert"}
# Source heads named otherwise than the family head they convert to (keys of `HEADS`, the class-name suffixes).
HEAD_ALIASES = {"ForPreTraining": "ForMaskedLM"}  # BERT's MLM + next-sentence head: the MLM part converts
# Architecture fields copied from the source config; a family option may not change them.
ARCHITECTURE_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "type_vocab_size", "layer_norm_eps", "pad_token_id",
)
COPIED_FIELDS = ARCHITECTURE_FIELDS + (
    "hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "bos_token_id", "eos_token_id",
    "classifier_dropout", "id2label", "label2id", "problem_type",
)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass
class ConversionReport:
    """What happened to every tensor: loaded (target <- source), dropped (source: reason), initialised (target: by whom)."""

    source: str
    source_architecture: str
    target_class: str
    max_length: int
    loaded: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    initialised: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Why the converted model cannot reproduce the original even where its pattern covers the input.
    lossy: set[str] = field(default_factory=set)

    def summary(self) -> str:
        lines = [
            f"{self.source} ({self.source_architecture}) -> {self.target_class}, max_length {self.max_length}",
            f"  loaded {len(self.loaded)} tensors",
        ]
        lines += [f"  dropped {name}: {reason}" for name, reason in self.dropped.items()]
        lines += [f"  initialised {name}: {how}" for name, how in self.initialised.items()]
        lines += [f"  note: {note}" for note in self.notes]
        lines += [f"  lossy: {reason}" for reason in sorted(self.lossy)]
        return "\n".join(lines)


@dataclass
class Conversion:
    model: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase | None
    report: ConversionReport


def convert(
    source: str | Path | transformers.PreTrainedModel,
    model_type: str = "hfe_roberta",
    max_length: int | None = None,
    family_options: dict | None = None,
    tokenizer: transformers.PreTrainedTokenizerBase | str | Path | None = None,
    output_dir: str | Path | None = None,
    base_model: str | None = None,
    license: str | None = None,
    positions: str = "tile",
) -> Conversion:
    """Convert `source` (a local folder or an in-memory RoBERTa/BERT model, any head) into `model_type`.

    `max_length`: longest input of the converted model (default: the source's). `family_options`:
    config fields of the family (e.g. `{"attention_window": 256}`). `tokenizer`: defaults to the one in
    the source folder; its `model_max_length` is set to `max_length`. `positions`: how the position table
    grows past the source's length, `"tile"` (Longformer's copy) or `"interpolate"`. With `output_dir`, the model,
    tokenizer, custom code and a model card are saved there (see `hf_efficient.hub.save_checkpoint`).
    """
    check_family(model_type, "family")
    family = FAMILIES[model_type]
    if isinstance(source, transformers.PreTrainedModel):
        source_config, architecture = source.config, type(source).__name__
        state = dict(source.state_dict())
        source_name = base_model or getattr(source.config, "_name_or_path", "") or architecture
    else:
        folder = Path(source)
        source_config, architecture = read_source_config(folder)
        state = read_state_dict(folder)
        source_name = base_model or str(folder)
        if tokenizer is None:
            tokenizer = folder
        if license is None and (folder / "README.md").is_file():
            from huggingface_hub import ModelCard

            license = ModelCard.load(folder / "README.md").data.license
    kind, head = check_source(source_config, architecture)
    if positions not in POSITION_INITS:
        raise ValueError(f"unknown positions {positions!r}; choose from {sorted(POSITION_INITS)}")
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(tokenizer)

    offset = source_config.pad_token_id + 1 if kind == "roberta" else 0
    source_length = source_config.max_position_embeddings - offset
    max_length = source_length if max_length is None else max_length
    if max_length < source_length:
        raise ValueError(
            f"max_length {max_length} is below the original's {source_length}; conversion only extends the position "
            "table (to use shorter inputs, keep the length and truncate them)."
        )
    options = dict(family_options or {})
    for name in ("cls_token_id", "sep_token_id", "mask_token_id"):  # e.g. Longformer's automatic global tokens
        config_fields = {f.name for f in dataclasses.fields(family.config_class)}
        if name in config_fields and name not in options and getattr(tokenizer, name, None) is not None:
            options[name] = getattr(tokenizer, name)
    config = target_config(family.config_class, source_config, kind, max_length + offset, options)
    model_class = family.models[head]
    report = ConversionReport(source_name, architecture, model_class.__name__, max_length)
    if config.reversible and "reversible" not in (family_options or {}):
        config.reversible = False
        report.notes.append(
            "reversible layers switched off: the source is a post-norm encoder; pass reversible=True to trade "
            "fidelity for depth-independent memory (then continue pretraining)."
        )
    elif config.reversible:
        report.lossy.add("reversible (pre-norm) layers compute a different function from the post-norm source")
    mapped = map_state_dict(state, kind, head, source_config, report)
    if "lm_head.decoder.weight" in mapped:
        config.tie_word_embeddings = False
    table = ("" if head == "Model" else "roberta.") + "embeddings.position_embeddings.weight"
    mapped[table] = POSITION_INITS[positions](mapped[table], offset, config.max_position_embeddings)
    if max_length > source_length:
        report.notes.append(
            f"position table {'tiled' if positions == 'tile' else 'interpolated'} from {source_length} to "
            f"{max_length} positions"
            + (f" (rows 0..{offset - 1} kept)." if offset else ".")
        )
    model = model_class(config)
    load_strict(model, mapped, report)
    model.eval()
    if tokenizer is not None:
        if len(tokenizer) > config.vocab_size:
            raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model only {config.vocab_size} embeddings.")
        tokenizer.model_max_length = max_length
        tokenizer.init_kwargs["model_max_length"] = max_length
    else:
        report.notes.append("no tokenizer given: none is saved with the model.")
    if output_dir is not None:
        save_checkpoint(model, output_dir, tokenizer, base_model=source_name, license=license)
    return Conversion(model, tokenizer, report)


def read_source_config(folder: Path) -> tuple[transformers.PretrainedConfig, str]:
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist.")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"checkpoint folder {folder} has no config.json.")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise FileNotFoundError(f"checkpoint folder {folder} has no weights (expected one of {', '.join(WEIGHT_FILES)}).")
    check_files(folder)
    raw = json.loads((folder / "config.json").read_text())
    model_type = raw.get("model_type")
    if model_type not in SOURCE_PREFIXES:
        raise ValueError(
            f"unsupported architecture: {folder} is a {model_type!r} checkpoint; convert supports "
            f"{sorted(SOURCE_PREFIXES)} (RoBERTa- and BERT-style encoders)."
        )
    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    architectures = raw.get("architectures") or [type(config).__name__.replace("Config", "Model")]
    return config, architectures[0]


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor in the folder's weight files (single or sharded, safetensors or torch)."""
    from safetensors.torch import load_file

    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index_name).is_file():
            shards = sorted(set(json.loads((folder / index_name).read_text())["weight_map"].values()))
            missing = [name for name in shards if not (folder / name).is_file()]
            if missing:
                raise FileNotFoundError(f"checkpoint folder {folder} is missing weight shards {missing} named in {index_name}.")
            break
    else:
        shards = ["model.safetensors" if (folder / "model.safetensors").is_file() else "pytorch_model.bin"]
    state = {}
    for name in shards:
        path = folder / name
        state.update(load_file(path) if name.endswith(".safetensors") else torch.load(path, map_location="cpu", weights_only=True))
    return state


def check_source(config: transformers.PretrainedConfig, architecture: str) -> tuple[str, str]:
    """(source kind, family head) of a supported source; ValueError saying what is unsupported."""
    if config.model_type not in SOURCE_PREFIXES:
        raise ValueError(
            f"unsupported architecture {architecture} (model_type {config.model_type!r}); convert supports "
            f"{sorted(SOURCE_PREFIXES)} (RoBERTa- and BERT-style encoders)."
        )
    kind = "bert" if config.model_type == "bert" else "roberta"
    suffix = next((suffix for suffix in (*HEADS, *HEAD_ALIASES)
                   if re.fullmatch(rf"[A-Za-z]*{suffix}", architecture) and not architecture.endswith("PreTrainedModel")),
                  None)
    head = HEAD_ALIASES.get(suffix, suffix)
    if head is None or architecture.endswith(("CausalLM", "LMHeadModel", "NextSentencePrediction")):
        raise ValueError(
            f"unsupported architecture {architecture}: convert maps the encoder heads "
            f"{', '.join((*HEADS, *HEAD_ALIASES))} (decoder and next-sentence heads have no counterpart)."
        )
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError(f"unsupported architecture {architecture}: a decoder / cross-attention configuration.")
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
        raise ValueError(
            f"unsupported position_embedding_type {config.position_embedding_type!r}: only absolute positions convert."
        )
    if head == "ForMaskedLM" and config.hidden_act != "gelu":
        raise ValueError(f"unsupported MLM head activation {config.hidden_act!r}: the family LM head uses exact gelu.")
    return kind, head


def target_config(config_class: type, source: transformers.PretrainedConfig, kind: str, max_positions: int,
                  options: dict) -> transformers.PretrainedConfig:
    fields = {f.name for f in dataclasses.fields(config_class)} | {"id2label", "label2id", "problem_type"}
    changed = sorted(set(options) & set(ARCHITECTURE_FIELDS + ("max_position_embeddings", "position_numbering")))
    if changed:
        raise ValueError(f"family options may not change the source architecture: {changed}.")
    unknown = sorted(set(options) - fields - {"chunk_size_feed_forward"})
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for {config_class.model_type}; its fields: {sorted(fields)}.")
    values = {name: getattr(source, name) for name in COPIED_FIELDS if hasattr(source, name)}
    values["id2label"] = {int(k): v for k, v in source.id2label.items()}
    values["label2id"] = dict(source.label2id)
    return config_class(
        **values,
        max_position_embeddings=max_positions,
        position_numbering="absolute" if kind == "bert" else "padding_offset",
        **options,
    )


def tile_positions(table: torch.Tensor, offset: int, rows: int) -> torch.Tensor:
    """Longformer's copy: rows 0..offset-1 kept, then the pretrained positions repeated until `rows`."""
    pretrained = table[offset:]
    repeats = -(-(rows - offset) // pretrained.shape[0])
    return torch.cat([table[:offset], pretrained.repeat(repeats, 1)])[:rows].clone()


def interpolate_positions(table: torch.Tensor, offset: int, rows: int) -> torch.Tensor:
    """The pretrained positions stretched linearly over `rows - offset` rows (ends kept); rows 0..offset-1 kept."""
    pretrained = table[offset:].T.unsqueeze(0)  # [1, hidden, source positions]
    stretched = torch.nn.functional.interpolate(pretrained.float(), size=rows - offset, mode="linear",
                                                align_corners=True)
    return torch.cat([table[:offset], stretched[0].T.to(table.dtype)]).clone()


POSITION_INITS = {"tile": tile_positions, "interpolate": interpolate_positions}


def map_state_dict(state: dict[str, torch.Tensor], kind: str, head: str, config, report: ConversionReport) -> dict:
    """Source names -> target names; what has no place in the target is recorded in `report.dropped`."""
    prefix = SOURCE_PREFIXES[config.model_type] + "."
    encoder = "" if head == "Model" else "roberta."  # the bare encoder's own names carry no prefix
    target_has_pooler = head in ("Model", "ForMultipleChoice")
    mapped: dict[str, torch.Tensor] = {}
    sources: dict[str, str] = {}
    word_embeddings = None
    for name, tensor in state.items():
        key = name.removeprefix(prefix)
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))
        if key.startswith(("embeddings.", "encoder.", "pooler.")):
            if key in ("embeddings.position_ids", "embeddings.token_type_ids"):
                report.dropped[name] = "index buffer, rebuilt by the model"
                continue
            if key.startswith("pooler."):
                if kind == "bert" and head == "ForSequenceClassification":
                    target = key.replace("pooler.", "classifier.", 1)  # BERT's pooler is RoBERTa's classifier.dense
                elif target_has_pooler:
                    target = encoder + key
                else:
                    report.dropped[name] = f"pooler: the {head} head does not use it"
                    continue
            else:
                target = encoder + key
                if key == "embeddings.word_embeddings.weight":
                    word_embeddings = tensor
        else:
            target = map_head_key(key, kind, head)
            if target is None:
                report.dropped[name] = "next-sentence-prediction head (no counterpart)"
                continue
        if target in mapped:
            raise ValueError(f"tensors {sources[target]!r} and {name!r} both map to {target!r}.")
        mapped[target], sources[target] = tensor, name
    # Tied copies: the decoder weight of the MLM head is the word embedding matrix, its bias is lm_head.bias.
    for target, tied in (("lm_head.decoder.weight", word_embeddings), ("lm_head.decoder.bias", mapped.get("lm_head.bias"))):
        if target in mapped and tied is not None and torch.equal(mapped[target], tied):
            report.dropped[sources.pop(target)] = "tied copy of " + ("the word embeddings" if "weight" in target else "lm_head.bias")
            del mapped[target]
    if "lm_head.decoder.bias" in mapped:
        raise ValueError(f"{sources['lm_head.decoder.bias']!r} differs from the LM head bias; an untied decoder bias is not supported.")
    report.loaded.update(sources)
    return mapped


def map_head_key(key: str, kind: str, head: str) -> str | None:
    if kind == "bert":
        replacements = {
            "cls.predictions.transform.dense.": "lm_head.dense.",
            "cls.predictions.transform.LayerNorm.": "lm_head.layer_norm.",
            "cls.predictions.decoder.": "lm_head.decoder.",
            "cls.predictions.bias": "lm_head.bias",
        }
        if head == "ForSequenceClassification":
            replacements["classifier."] = "classifier.out_proj."
        for old, new in replacements.items():
            if key.startswith(old):
                return new + key[len(old):]
        if key.startswith("cls.seq_relationship."):
            return None
    return key


def load_strict(model: nn.Module, mapped: dict[str, torch.Tensor], report: ConversionReport) -> None:
    """Copy `mapped` into `model`; shapes checked; every parameter loaded, tied, or set by a family hook."""
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers())
    targets = {**params, **buffers}
    mechanisms = {name: module for name, module in model.named_modules() if isinstance(module, AttentionMechanism)}
    for name in sorted(set(mapped) - set(targets)):
        # A mechanism without one of the dense projections (e.g. shared-QK attention has no `key`).
        owner, _, projection = name.rpartition(".")[0].rpartition(".")
        if owner in mechanisms and projection in ("query", "key", "value"):
            mechanism = type(mechanisms[owner]).__name__
            report.dropped[report.loaded.pop(name)] = f"{mechanism} has no `{projection}` projection"
            report.lossy.add(f"{mechanism} has no `{projection}` projection: outputs differ from the original")
            del mapped[name]
    unexpected = sorted(set(mapped) - set(targets))
    if unexpected:
        raise ValueError(f"source tensors with no place in {type(model).__name__}: "
                         f"{[report.loaded.get(k, k) for k in unexpected]}.")
    wrong = [f"{name}: source {tuple(t.shape)} vs target {tuple(targets[name].shape)}"
             for name, t in mapped.items() if t.shape != targets[name].shape]
    if wrong:
        raise ValueError("shape mismatch: " + "; ".join(wrong))
    with torch.no_grad():
        for name, tensor in mapped.items():
            targets[name].copy_(tensor)
        hooked = run_family_hooks(model, set(mapped))
    report.initialised.update(hooked)
    loaded_ptrs = {targets[name].data_ptr() for name in mapped}
    missing = sorted(name for name, p in params.items()
                     if name not in mapped and name not in hooked and p.data_ptr() not in loaded_ptrs)
    fresh = [name for name in missing if name.startswith("roberta.encoder.final_layer_norm.")]
    for name in fresh:
        report.initialised[name] = "fresh LayerNorm (identity) of the reversible encoder"
    missing = [name for name in missing if name not in fresh]
    if missing:
        raise ValueError(
            f"{type(model).__name__} parameters with no source tensor: {missing}. A family whose attention has extra "
            "parameters initialises them in its mechanism's `init_from_dense()` hook."
        )
    for name in buffers:
        if name not in mapped:
            report.initialised[name] = "buffer built from the config"


def run_family_hooks(model: nn.Module, loaded: set[str]) -> dict[str, str]:
    """Call `init_from_dense()` on every attention mechanism that has it; target name -> description."""
    initialised = {}
    for module_name, module in model.named_modules():
        hook = getattr(module, "init_from_dense", None)
        if not isinstance(module, AttentionMechanism) or not callable(hook):
            continue
        names = hook()
        own = [name for name, _ in module.named_parameters()]
        names = [name for name in own if f"{module_name}.{name}" not in loaded] if names is None else list(names)
        unknown = sorted(set(names) - set(own) - {name for name, _ in module.named_buffers()})
        if unknown:
            raise ValueError(f"{type(module).__name__}.init_from_dense() returned unknown names {unknown}.")
        for name in names:
            initialised[f"{module_name}.{name}"] = f"{type(module).__name__}.init_from_dense()"
    return initialised


@torch.no_grad()
def compare_outputs(original: nn.Module, converted: nn.Module, **inputs) -> dict[str, float]:
    """How far `converted` moved from `original` on the same inputs (both in eval mode).

    `hidden_max_abs`: max |difference| over every layer's hidden states at real (unpadded) tokens;
    `<output>_max_abs` for the head outputs both have (logits, start/end logits, pooler output);
    `mlm_loss_original` / `mlm_loss_converted` when `labels` are given to MLM models.
    """
    a = original(**inputs, output_hidden_states=True)
    b = converted(**inputs, output_hidden_states=True)
    shape = b.hidden_states[0].shape[:2]
    mask = inputs.get("attention_mask")
    real = mask.reshape(shape).bool() if mask is not None else torch.ones(shape, dtype=torch.bool)
    result = {"hidden_max_abs": max((x - y)[real].abs().max().item() for x, y in zip(a.hidden_states, b.hidden_states, strict=True))}
    for name in ("logits", "start_logits", "end_logits", "pooler_output"):
        source_name = "prediction_logits" if name == "logits" and "prediction_logits" in a else name
        x, y = a.get(source_name), b.get(name)
        if x is not None and y is not None:
            per_token = x.dim() >= 2 and x.shape[:2] == shape
            result[f"{name}_max_abs"] = (x - y)[real if per_token else ...].abs().max().item()
    if "labels" in inputs and a.get("loss") is not None:
        result["mlm_loss_original"], result["mlm_loss_converted"] = a.loss.item(), b.loss.item()
    return result
