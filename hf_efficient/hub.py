"""Hub-ready checkpoints: one folder with safetensors weights, config (with `auto_map`), the modeling
code, the tokenizer and a model card, that loads with `pip install hf_efficient` and without it
(`trust_remote_code=True`).

`save_checkpoint` writes that folder; `push_checkpoint` writes it to a temporary folder and uploads
it in one commit (`HfApi.upload_folder`); `load_tokenizer` is the one way the package reads a
tokenizer folder (conversion and every workflow stage). A plain `model.save_pretrained` / `model.push_to_hub` already writes
the weights, config and modeling code (the families are registered for auto classes), but neither
the tokenizer nor this model card.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import transformers
from huggingface_hub import CommitInfo, HfApi, ModelCard, ModelCardData
from safetensors import SafetensorError, safe_open

from .models.configuration_base import HfeConfig

PIPELINE_TAGS = {
    "AutoModel": "feature-extraction",
    "AutoModelForMaskedLM": "fill-mask",
    "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForTokenClassification": "token-classification",
    "AutoModelForQuestionAnswering": "question-answering",
}
# Options shared by every family that change how attention or memory work (shown on the card).
SHARED_SETTINGS = ("attention_type", "layer_attention_types", "reversible", "reversible_recompute_min_length",
                   "chunk_size_feed_forward", "mlm_loss_chunk_size")
# Any one of these file sets makes a loadable tokenizer folder (BPE, WordPiece, SentencePiece).
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("vocab.txt",), ("sentencepiece.bpe.model",),
                   ("tokenizer.model",), ("spiece.model",))


# The files of a checkpoint or tokenizer folder that transformers reads: JSON objects, and plain text.
JSON_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
              "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json")
TEXT_FILES = ("merges.txt", "vocab.txt")


def check_files(folder: str | Path) -> None:
    """ValueError naming the first file of a checkpoint or tokenizer folder that is truncated or corrupted.

    The JSON files transformers reads must parse to JSON objects, every `*.safetensors` must have a whole header and
    data, the tokenizers' text files must be UTF-8 (other files, e.g. sentence-transformers' own, are not read). transformers would stop on these with a traceback from deep inside a
    loader (safetensors' "incomplete metadata, file not fully covered") or a message naming no file.
    """
    folder = Path(folder)
    for path in (folder / name for name in JSON_FILES if (folder / name).is_file()):
        try:
            content = json.loads(path.read_bytes())
        except UnicodeDecodeError:
            raise ValueError(f"{path} is not a text file (not UTF-8): the file is corrupted") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error}): the file is truncated or corrupted") from None
        if not isinstance(content, dict):
            raise ValueError(f"{path} holds a JSON {type(content).__name__}, not an object: the file is corrupted")
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(path, framework="pt"):
                pass
        except SafetensorError as error:
            raise ValueError(f"{path} is not a readable safetensors file ({error}): the file is truncated or "
                             "corrupted") from None
    for path in (folder / name for name in TEXT_FILES):
        if path.is_file():
            try:
                path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path} is not a text file (not UTF-8): the file is corrupted") from None


def load_tokenizer(folder: str | Path) -> transformers.PreTrainedTokenizerBase:
    """The tokenizer saved in `folder`; FileNotFoundError naming what is missing.

    The files are checked first because transformers 5 silently builds a 5-token tokenizer from a
    folder that has a `tokenizer_config.json` but no vocabulary.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"tokenizer folder {folder} does not exist")
    if not any(all((folder / name).is_file() for name in names) for names in TOKENIZER_FILES):
        expected = " or ".join(" + ".join(names) for names in TOKENIZER_FILES)
        raise FileNotFoundError(f"no tokenizer files in {folder} (expected {expected})")
    check_files(folder)
    try:
        return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError) as error:
        raise FileNotFoundError(f"the tokenizer in {folder} does not load: {error}") from error


def attention_settings(config: HfeConfig) -> dict:
    """The config fields that make this family what it is: its own fields plus the shared attention/memory ones."""
    base_fields = {f.name for f in dataclasses.fields(HfeConfig)}
    own = [f.name for f in dataclasses.fields(config) if f.name not in base_fields]
    return {name: getattr(config, name) for name in (*SHARED_SETTINGS, *own)}


def model_card(
    model: transformers.PreTrainedModel,
    base_model: str | None = None,
    license: str | None = None,
    repo_id: str | None = None,
    intended_use: str | None = None,
) -> ModelCard:
    """A README.md with metadata (family, attention settings, max length, base checkpoint, license, use)."""
    config = model.config
    auto_class = type(model).auto_class
    max_length = config.max_sequence_length
    settings = attention_settings(config)
    is_hub_id = base_model is not None and not Path(base_model).exists() and base_model.count("/") == 1
    data = ModelCardData(
        library_name="transformers",
        license=license or "other",
        base_model=base_model if is_hub_id else None,
        pipeline_tag=PIPELINE_TAGS.get(auto_class),
        tags=["hf_efficient", config.model_type, "long-context", *sorted({settings["attention_type"]} |
                                                                        set(settings["layer_attention_types"] or []))],
    )
    name = repo_id or "path/to/this/folder"
    rows = "\n".join(f"| `{key}` | `{value}` |" for key, value in settings.items())
    intended_use = intended_use or (
        f"Encoding inputs of up to {max_length} tokens ({PIPELINE_TAGS.get(auto_class, 'multiple-choice')}). "
        "A checkpoint fresh from `hf-efficient convert` keeps the original's weights with a longer position table "
        "(the original's positions tiled or stretched): continue MLM pretraining on long documents (`hf-efficient adapt --model_name_or_path <folder>`) before "
        "fine-tuning or evaluating it on long inputs."
    )
    body = f"""
# {type(model).__name__}

A `{config.model_type}` encoder from [hf_efficient](https://pypi.org/project/hf-efficient/): a RoBERTa-style
encoder whose self-attention is `{settings['attention_type']}`, for inputs of up to **{max_length} tokens**.

- **Family:** `{config.model_type}` ({type(model).__name__}, loaded by `{auto_class}`)
- **Max length:** {max_length} tokens (`max_position_embeddings` = {config.max_position_embeddings})
- **Base checkpoint:** {base_model or 'none (trained from scratch)'}
- **License:** {license or 'not stated: see the base checkpoint'}
- **Size:** {config.num_hidden_layers} layers, hidden {config.hidden_size}, {config.num_attention_heads} heads, vocabulary {config.vocab_size}

## Attention settings

| field | value |
|---|---|
{rows}

## Intended use

{intended_use}

## How to load

With the package (`pip install hf_efficient`), no remote code runs:

```python
import hf_efficient  # registers the families with the Auto classes
from transformers import {auto_class}, AutoTokenizer

model = {auto_class}.from_pretrained("{name}")
tokenizer = AutoTokenizer.from_pretrained("{name}")
```

Without the package, the modeling code shipped in this repository is used:

```python
from transformers import {auto_class}, AutoTokenizer

model = {auto_class}.from_pretrained("{name}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("{name}")
```
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")


def save_checkpoint(
    model: transformers.PreTrainedModel,
    folder: str | Path,
    tokenizer: transformers.PreTrainedTokenizerBase | None = None,
    **card,
) -> Path:
    """Write weights (safetensors), config with `auto_map`, modeling code, tokenizer and README.md to `folder`.

    `card`: `base_model`, `license`, `repo_id`, `intended_use` for the model card.
    """
    folder = Path(folder)
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    model_card(model, **card).save(folder / "README.md")
    return folder


def push_checkpoint(
    model: transformers.PreTrainedModel,
    repo_id: str,
    tokenizer: transformers.PreTrainedTokenizerBase | None = None,
    token: str | None = None,
    private: bool | None = None,
    commit_message: str = "Upload hf_efficient checkpoint",
    **card,
) -> CommitInfo:
    """Create `repo_id` if needed and upload exactly the files `save_checkpoint` writes, in one commit."""
    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(model, tmp, tokenizer, repo_id=repo_id, **card)
        return api.upload_folder(repo_id=repo_id, folder_path=tmp, commit_message=commit_message)
