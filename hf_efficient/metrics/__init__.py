"""`evaluate` metric modules shipped with the package, so that metrics load offline.

`evaluate.load("accuracy")` fetches the module from the Hugging Face Hub; `load_metric("accuracy")`
loads the copy in this folder instead (`evaluate.load(path_to_folder)`). Shipped: accuracy, f1
(classification), seqeval (entity spans of tag sequences), squad (exact match and F1 of answer texts).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import evaluate

METRICS_DIR = Path(__file__).resolve().parent


@functools.cache
def load_metric(name: str) -> evaluate.EvaluationModule:
    """The shipped `evaluate` module `name` (`"accuracy"`, `"f1"`, `"seqeval"`, `"squad"`), loaded without the network,
    once per process: every validation calls it (`compute` with whole predictions keeps no state between calls)."""
    path = METRICS_DIR / name
    if not (path / f"{name}.py").is_file():
        shipped = sorted(p.name for p in METRICS_DIR.iterdir() if (p / f"{p.name}.py").is_file())
        raise ValueError(f"no shipped metric {name!r}; shipped: {shipped}")
    import evaluate  # here, not with the module: it takes seconds, which `hf-efficient finetune --help` need not wait

    return evaluate.load(str(path))
