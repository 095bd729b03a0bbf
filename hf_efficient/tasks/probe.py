"""The frozen-checkpoint probe: a logistic regression on mean-pooled embeddings, as baseline and as head initialisation.

Every fine-tuning run reports it next to the fine-tuned model and the majority class, so a user sees at once
whether fine-tuning added anything over what the frozen checkpoint already carries. By default the new head
also starts as this probe (linear probing, then fine-tuning: Kumar et al. 2022, "Fine-Tuning can Distort
Pretrained Features"), so training starts from a classifier that already beats the majority class instead of
from random logits that a large learning rate can push into predicting one class.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np
import torch
from transformers import PreTrainedModel

from .task_data import batch_outputs

# tanh(HEAD_SCALE * z) ~ HEAD_SCALE * z for standardised features z, so the head's dense + tanh layer passes them on
HEAD_SCALE = 0.1
PROBE_C = (0.01, 0.1, 1.0)  # inverse L2 strengths tried; the validation split picks one


def frozen_features(model: PreTrainedModel, dataset: datasets.Dataset, collator, batch_size: int) -> np.ndarray:
    """[examples, hidden] what the classification head's probe start reads (`probe_features`: the mean of the real
    tokens, or a text pair's u * v, its segments read as the fine-tuned model reads them), from the model's encoder in
    eval mode."""
    encoder, training = model.base_model, model.training
    encoder.eval()

    def features(batch: dict) -> torch.Tensor:
        hidden = encoder(**batch).last_hidden_state.float()
        return model.classifier.probe_features(hidden, batch["attention_mask"], batch.get("token_type_ids"))

    rows = batch_outputs(features, dataset, collator, batch_size, next(encoder.parameters()).device)
    model.train(training)
    return rows.numpy()


@dataclass
class Probe:
    """Logits = ((x - mean) / scale) @ weight.T + bias, over all `num_labels` labels."""

    mean: np.ndarray
    scale: np.ndarray
    weight: np.ndarray
    bias: np.ndarray

    def logits(self, features: np.ndarray) -> np.ndarray:
        return ((features - self.mean) / self.scale) @ self.weight.T + self.bias

    def head_logits(self, features: np.ndarray) -> np.ndarray:
        """What the head `init_head` builds computes on these features: the model's logits before fine-tuning."""
        return np.tanh(HEAD_SCALE * (features - self.mean) / self.scale) / HEAD_SCALE @ self.weight.T + self.bias


def fit_probe(features: np.ndarray, labels: np.ndarray, num_labels: int, multi_label: bool,
              validation: tuple[np.ndarray, np.ndarray], class_weight: str | None = None, seed: int = 0) -> Probe:
    """Standardise `features` and fit a logistic regression (softmax over classes, or one per label for multi-label),
    its L2 strength chosen from PROBE_C by the validation split's cross-entropy.

    Choosing by cross-entropy keeps the logits calibrated: a nearly separable training set otherwise gives
    huge weights, and a head started from them turns small feature changes into very large losses.
    """
    mean, scale = features.mean(0), features.std(0) + 1e-6
    z = (features - mean) / scale
    candidates = [Probe(mean, scale, *fit_weights(z, labels, num_labels, multi_label, c, class_weight, seed))
                  for c in PROBE_C]
    return min(candidates, key=lambda candidate: cross_entropy(candidate.logits(validation[0]), validation[1], multi_label))


def fit_weights(z: np.ndarray, labels: np.ndarray, num_labels: int, multi_label: bool, c: float,
                class_weight: str | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(weight [labels, features], bias [labels]) of a logistic regression with inverse L2 strength `c`.

    Classes or labels that training never shows (or always shows) get a constant logit of -10 (or +10);
    with a single class in training, the probe predicts it.
    """
    from sklearn.linear_model import LogisticRegression  # here: a command's --help need not import scikit-learn

    weight, bias = np.zeros((num_labels, z.shape[1])), np.full(num_labels, -10.0)

    def fit(targets):
        return LogisticRegression(C=c, max_iter=2000, class_weight=class_weight, random_state=seed).fit(z, targets)

    if multi_label:
        for k in range(num_labels):
            column = labels[:, k].astype(int)
            if column.min() == column.max():
                bias[k] = 10.0 if column[0] else -10.0
                continue
            model = fit(column)
            weight[k], bias[k] = model.coef_[0], model.intercept_[0]
    elif len(set(labels.tolist())) == 1:  # one class seen: predict it
        bias[labels[0]] = 0.0
    else:
        model = fit(labels)
        classes = model.classes_
        if len(classes) == 2:  # sklearn fits one logit for two classes: split it symmetrically
            weight[classes] = np.stack([-model.coef_[0], model.coef_[0]]) / 2
            bias[classes] = [-model.intercept_[0] / 2, model.intercept_[0] / 2]
        else:
            weight[classes], bias[classes] = model.coef_, model.intercept_
    return weight, bias


def cross_entropy(logits: np.ndarray, labels: np.ndarray, multi_label: bool) -> float:
    """Mean softmax cross-entropy (binary cross-entropy per label for multi-label) of `logits`."""
    if multi_label:
        return float(np.mean(np.logaddexp(0, logits) - labels * logits))
    shifted = logits - logits.max(1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    return float(-log_probabilities[np.arange(len(labels)), labels].mean())


@torch.no_grad()
def init_head(head: torch.nn.Module, probe: Probe) -> None:
    """Set RoBERTa's head (dense -> tanh -> out_proj) to compute the probe's logits from its pooled features.

    dense standardises the probe's features (the last `hidden_size` of the pooled ones, `probe_features`; the others
    get weight 0) and scales them by HEAD_SCALE (tanh is then nearly linear), out_proj undoes the scale and applies
    the probe's weights, so fine-tuning starts from the probe's predictions.
    """
    dense, out = head.dense, head.out_proj
    weight = torch.zeros_like(dense.weight)
    weight[:, -dense.out_features:] = torch.diag(torch.as_tensor(HEAD_SCALE / probe.scale, dtype=dense.weight.dtype))
    dense.weight.copy_(weight)
    dense.bias.copy_(torch.as_tensor(-HEAD_SCALE * probe.mean / probe.scale, dtype=dense.bias.dtype))
    out.weight.copy_(torch.as_tensor(probe.weight / HEAD_SCALE, dtype=out.weight.dtype))
    out.bias.copy_(torch.as_tensor(probe.bias, dtype=out.bias.dtype))
