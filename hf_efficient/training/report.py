"""Reports: metrics as JSON, PNG plots (matplotlib, Agg) of loss curves and per-stage metrics, a summary table.

A classifier's figures always show its baselines beside it: the majority class (or most frequent label set) and
the frozen-checkpoint probe, each computed on the split it is drawn against.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..tasks.classification import METRICS, classifier_result

COLORS = ("tab:green", "tab:red", "tab:purple")


def pyplot():
    """matplotlib's pyplot on the Agg backend (files, no window), imported at the first figure rather than with this
    module: it takes a second or two that a command's --help or argument check need not wait."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> None:
    """`fig` as a 100-dpi PNG at `path`, laid out tight; then closed (pyplot keeps every open figure alive)."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def __getattr__(name: str):
    """`from hf_efficient.training.report import plt` (the notebooks): `pyplot()`."""
    if name == "plt":
        return pyplot()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def curves(log_history: list[dict]) -> dict[str, tuple[list, list]]:
    """name -> (steps, values) for the training loss and every logged eval metric (`eval_loss`, `eval_accuracy`, ...)."""
    found: dict[str, tuple[list, list]] = {}
    for entry in log_history:
        for key, value in entry.items():
            if key == "loss" or (key.startswith("eval_") and key.split("_", 1)[1] in ("loss",) + METRICS):
                steps, values = found.setdefault(key, ([], []))
                steps.append(entry.get("step", len(steps)))
                values.append(value)
    return found


def legend(ax, **options) -> None:
    """A legend, unless nothing was drawn (a run that never logged or validated): matplotlib warns on an empty one."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**options)


def plot_stage(ax_loss, ax_metric, results: dict) -> None:
    """Training and held-out loss on `ax_loss`; a classifier's validation metrics and validation baselines on `ax_metric`."""
    found = curves(results.get("log_history", []))
    name = results.get("stage", "stage")
    if "loss" in found:
        ax_loss.plot(*found["loss"], label="training loss", color="tab:blue")
    if "eval_loss" in found:
        label = "held-out MLM loss" if "mlm_loss_before" in results else "validation loss"
        ax_loss.plot(*found["eval_loss"], "o-", label=label, color="tab:orange")
    if "mlm_loss_before" in results:
        ax_loss.scatter([0, results["global_step"]], [results["mlm_loss_before"], results["mlm_loss_after"]],
                        marker="*", s=120, color="tab:red", zorder=3, label="held-out before / after")
    ax_loss.set(title=f"{name}: loss", xlabel="optimizer step", ylabel="loss")
    legend(ax_loss)
    if ax_metric is None:
        return
    validation = results["baselines"]["validation"]
    for metric, color in zip(METRICS, COLORS, strict=True):
        if f"eval_{metric}" not in found:
            continue
        ax_metric.plot(*found[f"eval_{metric}"], "o-", label=f"validation {metric}", color=color)
        ax_metric.axhline(validation["majority"][metric], ls="--", color=color, label=f"majority, validation {metric}")
        ax_metric.axhline(validation["probe"][metric], ls=":", color=color, label=f"frozen probe, validation {metric}")
    ax_metric.set(title=f"{name}: validation metrics", xlabel="optimizer step", ylabel="validation score", ylim=(0, 1))
    # below the panel: inside, it would cover the baselines' lines, which span the whole width
    legend(ax_metric, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)


def measured_on(results: dict) -> str:
    """What a classifier's test scores were measured on: "150 test examples, 1 seed (42)"."""
    seed = results.get("settings", {}).get("seed")
    return f"{results['examples']['test']} test examples, 1 seed" + (f" ({seed})" if seed is not None else "")


def plot_test(ax, results: dict) -> None:
    """Bars: the fine-tuned classifier, the frozen probe and the majority baseline on the test split, labelled to 3
    decimals (two would show 0.697 and 0.702 alike)."""
    metrics = [m for m in METRICS if f"test_{m}" in results]
    width = 0.8 / 3
    kinds = [kind for kind in (("test", "fine-tuned", "tab:blue"), ("probe", "frozen probe", "tab:orange"),
                               ("majority", "majority", "lightgray")) if f"{kind[0]}_accuracy" in results]
    for i, (prefix, label, color) in enumerate(kinds):  # (a stage finished before probes were reported has none)
        bars = ax.bar([m + (i - 1) * width for m in range(len(metrics))], [results[f"{prefix}_{m}"] for m in metrics],
                      width, label=label, color=color)
        ax.bar_label(bars, fmt="%.3f", fontsize="small")
    ax.set(xticks=list(range(len(metrics))), xticklabels=metrics, ylim=(0, 1), ylabel="test score",
           title=f"test split: {measured_on(results)}")
    ax.legend(fontsize="small")


def write_stage_report(folder: Path, results: dict) -> None:
    """`metrics.json` and `loss.png` (plus the validation metrics beside it for a classifier) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(results, indent=2, default=str))
    classifier = "majority_accuracy" in results
    plt = pyplot()
    fig, axes = plt.subplots(1, 3 if classifier else 1, figsize=(16 if classifier else 6, 5 if classifier else 4),
                             squeeze=False)
    plot_stage(axes[0][0], axes[0][1] if classifier else None, results)
    if classifier:
        plot_test(axes[0][2], results)
    save_figure(fig, folder / "loss.png")


def write_workflow_report(folder: Path, stages: list[dict], extra: dict) -> None:
    """The whole run: `summary.json`, `loss_curves.png` (one panel per stage) and `stage_metrics.png`."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = {**extra, "stages": [{k: v for k, v in s.items() if k != "log_history"} for s in stages]}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, default=str))

    plt = pyplot()
    fig, axes = plt.subplots(1, len(stages), figsize=(5.5 * len(stages), 4), squeeze=False)
    for ax, results in zip(axes[0], stages, strict=True):
        plot_stage(ax, None, results)
    save_figure(fig, folder / "loss_curves.png")

    mlm = [s for s in stages if "mlm_loss_before" in s]
    tasks = [s for s in stages if "majority_accuracy" in s]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = [s["stage"] for s in mlm]
    positions = range(len(mlm))
    axes[0].bar([p - 0.2 for p in positions], [s["mlm_loss_before"] for s in mlm], 0.4, label="before")
    axes[0].bar([p + 0.2 for p in positions], [s["mlm_loss_after"] for s in mlm], 0.4, label="after")
    axes[0].set(xticks=list(positions), xticklabels=names, ylabel="held-out MLM loss",
                title="MLM loss on each stage's held-out text")
    axes[0].legend()
    for results in tasks:
        plot_test(axes[1], results)
        axes[1].set(title=f"classifier, test split: {measured_on(results)}")
    save_figure(fig, folder / "stage_metrics.png")


def summary_table(stages: list[dict]) -> str:
    """One row per stage: steps, the MLM loss before -> after, or test accuracy / macro-F1 vs the majority class."""
    lines = [f"{'stage':<10} {'steps':>6}  result", f"{'-' * 10} {'-' * 6}  {'-' * 60}"]
    for s in stages:
        if "mlm_loss_before" in s:
            result = (f"held-out MLM loss {s['mlm_loss_before']:.3f} -> {s['mlm_loss_after']:.3f} "
                      f"(perplexity {s['perplexity_before']:.1f} -> {s['perplexity_after']:.1f})")
        else:
            result = classifier_result(s)
        lines.append(f"{s['stage']:<10} {s['global_step']:>6}  {result}")
    return "\n".join(lines)
