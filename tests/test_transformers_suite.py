"""transformers' own model tests (`ModelTesterMixin`) on every family, on its dense path and its sparse path.

The tests ship in transformers' source distribution only; `scripts/setup_env.sh` unpacks the installed version's
into `.cache/transformers-tests/` (skipped here with that reason when absent). Each family runs them through a
tester like transformers' `tests/models/roberta/test_modeling_roberta.py`: tiny configs, one class per path.
The default suite runs `DEFAULT_TESTS`; the rest of the mixin (about 200 tests a class) is marked slow:
`pytest -m "" tests/test_transformers_suite.py`.
"""

import importlib
import sys
import types
import unittest
from pathlib import Path

import pytest
import transformers
from transformers.models.auto import modeling_auto

import hf_efficient
from tests.families import FAMILY_CASES, tiny_config

SOURCES = Path(__file__).parents[1] / ".cache" / "transformers-tests" / f"transformers-{transformers.__version__}"
PACKAGE = "transformers_tests"

# The Auto mapping each head of `hf_efficient.HEADS` joins, as transformers' tests look classes up by name there.
HEAD_MAPPINGS = {
    "Model": "MODEL_MAPPING_NAMES",
    "ForMaskedLM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "ForSequenceClassification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "ForTokenClassification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "ForQuestionAnswering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "ForMultipleChoice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
}


def import_model_tests() -> types.ModuleType:
    """transformers' `tests/test_modeling_common.py`, imported as a module of a package named `PACKAGE`.

    The sdist leaves out the two mixins it imports by relative path (`exporters/`, `generation/`): the export
    tests (the project's own are tests/test_compile.py) and the generation tests (encoders do not generate).
    """
    common = SOURCES / "tests" / "test_modeling_common.py"
    if not common.is_file():
        pytest.skip(f"transformers' test sources are not in {SOURCES} (scripts/setup_env.sh unpacks them)",
                    allow_module_level=True)
    pytest.importorskip("parameterized", reason="transformers' tests need `parameterized` (the dev extra)")
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [str(common.parent)]
        sys.modules[PACKAGE] = package
        for name, mixin in [("exporters.test_export", "ExportTesterMixin"),
                            ("generation.test_utils", "GenerationTesterMixin")]:
            parent, child = name.split(".")
            sys.modules.setdefault(f"{PACKAGE}.{parent}", types.ModuleType(f"{PACKAGE}.{parent}"))
            stub = types.ModuleType(f"{PACKAGE}.{name}")
            setattr(stub, mixin, type(mixin, (), {}))
            sys.modules[f"{PACKAGE}.{name}"] = stub
    return importlib.import_module(f"{PACKAGE}.test_modeling_common")


common = import_model_tests()


@pytest.fixture(scope="module", autouse=True)
def families_in_auto_mappings():
    """Every family's classes in the Auto name tables, as a model of transformers' own has them."""
    with pytest.MonkeyPatch.context() as patch:
        for model_type, family in hf_efficient.FAMILIES.items():
            for head, table in HEAD_MAPPINGS.items():
                patch.setitem(getattr(modeling_auto, table), model_type, family.models[head].__name__)
        yield


# Input lengths per path: the dense path at a length every family covers whole, the sparse one long enough for the
# blocked, chunked and projected kernels of the `sparse` settings in tests/families.py.
PATHS = {"dense": ("full_coverage", 7), "sparse": ("sparse", 64)}


class HfeModelTester:
    """transformers' model-tester protocol (cf. `RobertaModelTester`) for one family and path."""

    def __init__(self, parent, model_type: str, path: str):
        self.parent = parent
        self.model_type = model_type
        self.pattern, self.seq_length = PATHS[path]
        self.batch_size = 3
        self.is_training = True
        config = self.get_config()
        self.vocab_size = config.vocab_size
        self.hidden_size = config.hidden_size
        self.num_hidden_layers = config.num_hidden_layers
        self.num_attention_heads = config.num_attention_heads
        self.type_vocab_size = 2
        self.num_labels = 3
        self.num_choices = 2
        if config.model_type == "hfe_linformer" and self.seq_length > config.projected_length:
            self.key_length = config.projected_length  # the weights are over the k projected keys (transformers' hook)

    def get_config(self):
        # Reversible layers keep their activations below the default `reversible_recompute_min_length`, so that
        # gradient checkpointing applies to them as transformers' tests expect (the project's tests cover the
        # memory-saving backward, tests/families.py's TINY setting).
        return tiny_config(self.model_type, self.pattern, type_vocab_size=2, reversible_recompute_min_length=1024,
                           hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)

    def prepare_config_and_inputs_for_common(self):
        # Ids of ordinary tokens (from 3: <s>, <pad>, </s> are special), as in real text: a RoBERTa-style model
        # numbers positions around padding tokens, which an input of embeddings cannot show.
        inputs = {
            "input_ids": common.ids_tensor([self.batch_size, self.seq_length], self.vocab_size - 3) + 3,
            "token_type_ids": common.ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size),
            "attention_mask": common.random_attention_mask([self.batch_size, self.seq_length]),
        }
        return self.get_config(), inputs


# The mixin's tests in the default suite: those that caught this project's bugs, and the core of the contract
# (training, outputs, batching, gradient checkpointing), a few seconds a class.
DEFAULT_TESTS = {
    "test_reverse_loading_mapping", "test_training", "test_training_gradient_checkpointing",
    "test_training_gradient_checkpointing_use_reentrant_false", "test_training_gradient_checkpointing_use_reentrant_true",
    "test_gradient_checkpointing_enable_disable", "test_enable_input_require_grads_with_gradient_checkpointing",
    "test_all_tensors_are_parameter_or_buffer", "test_inputs_embeds_matches_input_ids",
    "test_retain_grad_hidden_states_attentions", "test_attention_outputs", "test_hidden_states_output",
    "test_batching_equivalence",
}

# Tests a family's path cannot pass, with the reason (what the family documents it does not do).
SKIPS = {
    ("hfe_reformer", "sparse"): {
        "test_retain_grad_hidden_states_attentions": (
            "the chunked and LSH kernels return attention weights scattered from their chunked probabilities, "
            "a by-product the output is not computed from (tests/test_wiring_attention.py)"),
    },
}


class HfeModelTest(common.ModelTesterMixin):
    model_type: str
    path: str

    def setUp(self):
        self.model_tester = HfeModelTester(self, self.model_type, self.path)


def model_test_class(model_type: str, path: str) -> type:
    family = hf_efficient.FAMILIES[model_type]
    name = "Test" + "".join(part.title() for part in model_type.split("_")) + path.title()
    skips = {test: unittest.skip(reason)(lambda self: None) for test, reason in SKIPS.get((model_type, path), {}).items()}
    cls = type(name, (HfeModelTest, unittest.TestCase), {
        "model_type": model_type,
        "path": path,
        "all_model_classes": tuple(family.models[head] for head in HEAD_MAPPINGS),
        "__module__": __name__,
        **skips,
    })
    for test in dir(cls):
        if test.startswith("test_") and test not in DEFAULT_TESTS and callable(getattr(cls, test)):  # not the flags
            # each class has its own copy of the mixin's test functions (`ModelTesterMixin.__init_subclass__`)
            setattr(cls, test, pytest.mark.slow(getattr(cls, test)))
    return cls


for _model_type in sorted(FAMILY_CASES):
    for _path in PATHS:
        _cls = model_test_class(_model_type, _path)
        globals()[_cls.__name__] = _cls
del _model_type, _path, _cls
