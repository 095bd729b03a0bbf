"""The fine-tuning tasks, model-free: each module registers one `task.Task` (its data checks, features, head, metrics
and model-free baseline) that `finetune`, `distill` and `bench-quality` run. See docs/architecture.md.
"""

# the tasks register in this order, the order `--task` lists them in and messages name them
# isort: off
from . import classification, token_classification, question_answering, multiple_choice  # noqa: F401

# isort: on
