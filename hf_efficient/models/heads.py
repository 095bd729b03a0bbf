"""RoBERTa's task heads over the shared encoder, on transformers' loss functions and output helpers.

A family binds each head to its config with a named subclass in `modeling_<family>.py`. Losses come
from `self.loss_function` (transformers' `LOSS_MAPPING`, picked from the class name), except the
chunked MLM loss, which never materialises the [length, vocab] logits.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutputWithPoolingAndCrossAttentions,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .backbone import HfeModel, HfePreTrainedModel, forward_docstring
from .configuration_base import HfeConfig


class HfeHeadModel(HfePreTrainedModel):
    """A task head over the shared encoder, kept at `self.roberta` so that RoBERTa's head checkpoints load by name."""

    add_pooling_layer = False

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.roberta = HfeModel(config, add_pooling_layer=self.add_pooling_layer)

    def encode(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        output_attentions: bool | None,
        output_hidden_states: bool | None,
        attention_inputs: dict,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        return self.roberta(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            **self.task_attention_inputs(input_ids, attention_inputs),
        )

    def task_attention_inputs(self, input_ids: torch.Tensor | None, attention_inputs: dict) -> dict:
        """The extra attention inputs of this call: the caller's, which a family's head mixin may complete with
        the task's defaults (e.g. Longformer-style global attention on `<s>`)."""
        return attention_inputs


class HfeLMHead(nn.Module):
    """RoBERTa's MLM head; `decoder.weight` is tied to the word embeddings."""

    def __init__(self, config: HfeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.layer_norm(F.gelu(self.dense(features))))


def chunked_mlm_loss(
    head: nn.Module,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """transformers' `ForMaskedLMLoss` (mean over the labelled tokens, or their sum over `num_items_in_batch`),
    never holding more than `chunk_size` rows of logits.

    Logits are computed for the labelled positions only, a chunk at a time, and recomputed in backward
    (checkpointed), so the [length, vocab] matrix never exists, in forward or backward.
    """
    selected = labels != -100
    count = selected.sum()
    if torch.compiler.is_compiling():
        # No boolean row selection under torch.compile (a data-dependent size, hence a graph break): every row,
        # a chunk at a time, unlabelled rows weighted 0 through `ignore_index`.
        hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    else:
        hidden, labels = hidden[selected], labels[selected]

    def chunk_loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(head(h).float(), y, reduction="sum", ignore_index=-100)

    total = hidden.new_zeros((), dtype=torch.float32)
    for h, y in zip(hidden.split(chunk_size), labels.split(chunk_size), strict=True):
        total = total + checkpoint(chunk_loss, h, y, use_reentrant=False)
    return total / (count if num_items_in_batch is None else num_items_in_batch)


class HfeForMaskedLM(HfeHeadModel):
    auto_class = "AutoModelForMaskedLM"
    # The loss divides by the Trainer's `num_items_in_batch`, so gradient accumulation averages over tokens exactly.
    accepts_loss_kwargs = True
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.lm_head = HfeLMHead(config)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, HfeLMHead):
            init.zeros_(module.bias)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings

    @forward_docstring(
        "Predict the masked tokens; with `labels`, the masked-language-modelling loss.",
        """\
    labels (torch.LongTensor of shape (batch_size, sequence_length), optional):
        Token ids to predict, -100 where no loss is taken.
    num_items_in_batch (torch.Tensor or int, optional):
        Labelled tokens across the gradient-accumulation steps (the Trainer passes it), so that accumulated
        losses average over tokens exactly.
""",
        """`MaskedLMOutput` (a tuple with `return_dict=False`): `loss` (with `labels`); `logits`
    `(batch_size, sequence_length, vocab_size)`, `None` in training with labels and
    `config.mlm_loss_chunk_size > 0` (the loss is then computed in chunks, never holding all logits); `hidden_states` and `attentions` when requested.""",
    )
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        global_attention_mask: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> MaskedLMOutput | tuple:
        outputs = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              {"global_attention_mask": global_attention_mask, **attention_inputs})
        hidden = outputs.last_hidden_state
        logits = loss = None
        if labels is not None and self.training and self.config.mlm_loss_chunk_size > 0:
            loss = chunked_mlm_loss(self.lm_head, hidden, labels.to(hidden.device), self.config.mlm_loss_chunk_size,
                                    num_items_in_batch)
        else:
            logits = self.lm_head(hidden)
            if labels is not None:
                loss = self.loss_function(logits, labels, self.config.vocab_size, num_items_in_batch=num_items_in_batch)
        output = MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                attentions=outputs.attentions)
        return self.returned(output, return_dict)


class HfeClassificationHead(nn.Module):
    """RoBERTa's sentence-level head, on the `<s>` token, the mean of the real tokens, or a text pair's two means
    (`config.classifier_pooling`).

    "pair" is sentence-transformers' SoftmaxLoss head (Reimers & Gurevych 2019): the masked means u and v of the
    first and the second segment (`token_type_ids` 0 and 1) classified as `[u, v, |u - v|, u * v]`, so that a
    sentence-embedding checkpoint's similarity of the two texts reaches the classifier directly.
    """

    def __init__(self, config: HfeConfig):
        super().__init__()
        self.pooling = config.classifier_pooling
        width = 4 * config.hidden_size if self.pooling == "pair" else config.hidden_size
        self.dense = nn.Linear(width, config.hidden_size)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def pool(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None,
             token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """What the head classifies: `(batch_size, hidden_size)`, or `(batch_size, 4 * hidden_size)` for "pair"."""
        if self.pooling == "cls":
            return features[:, 0]
        mask = torch.ones(features.shape[:2], device=features.device) if attention_mask is None else attention_mask
        if self.pooling == "mean":
            return masked_mean(features, mask)
        if token_type_ids is None:
            raise ValueError('classifier_pooling="pair" reads the two texts from token_type_ids (0: first, 1: second); '
                             "pass the tokenizer's token_type_ids of tokenizer(text, text_pair)")
        u, v = (masked_mean(features, mask * (token_type_ids == segment)) for segment in (0, 1))
        return torch.cat([u, v, (u - v).abs(), u * v], dim=-1)

    def probe_features(self, features: torch.Tensor, attention_mask: torch.Tensor,
                       token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """`(batch_size, hidden_size)`: what a probe start of this head reads, the last `hidden_size` columns `dense`
        receives. The mean of the real tokens; for "pair" the product u * v of the two texts' means, whose sum is
        their dot product, the similarity a sentence-embedding checkpoint was trained on."""
        if self.pooling == "pair":
            return self.pool(features, attention_mask, token_type_ids)[:, -self.dense.out_features:]
        return masked_mean(features, attention_mask)

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.dropout(self.pool(features, attention_mask, token_type_ids))
        x = self.dropout(torch.tanh(self.dense(x)))
        return self.out_proj(x)


def masked_mean(features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of `features` over the positions where `mask` is 1 (zeros where it has none)."""
    weights = mask.to(features.dtype).unsqueeze(-1)
    return (features * weights).sum(1) / weights.sum(1).clamp(min=1)


class HfeForSequenceClassification(HfeHeadModel):
    auto_class = "AutoModelForSequenceClassification"

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.classifier = HfeClassificationHead(config)
        self.post_init()

    @forward_docstring(
        "Classify each sequence (or regress a value); with `labels`, the loss.",
        """\
    labels (torch.Tensor of shape (batch_size,) or (batch_size, num_labels), optional):
        Class ids; floats for regression (`config.num_labels == 1`); for multi-label classification one 0/1
        target per label (`config.problem_type`, as in transformers).
""",
        """`SequenceClassifierOutput` (a tuple with `return_dict=False`): `loss` (with `labels`); `logits`
    `(batch_size, num_labels)`; `hidden_states` and `attentions` when requested.""",
    )
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> SequenceClassifierOutput | tuple:
        outputs = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              {"global_attention_mask": global_attention_mask, **attention_inputs})
        logits = self.classifier(outputs.last_hidden_state, attention_mask, token_type_ids)
        loss = None if labels is None else self.loss_function(labels, logits, self.config)
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                          attentions=outputs.attentions)
        return self.returned(output, return_dict)


class HfeForTokenClassification(HfeHeadModel):
    auto_class = "AutoModelForTokenClassification"
    # Like the MLM loss, a mean over labelled tokens: the Trainer's `num_items_in_batch` makes accumulation exact.
    accepts_loss_kwargs = True

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @forward_docstring(
        "Classify each token; with `labels`, the loss.",
        """\
    labels (torch.LongTensor of shape (batch_size, sequence_length), optional):
        A class id per token, -100 where no loss is taken.
    num_items_in_batch (torch.Tensor or int, optional):
        Labelled tokens across the gradient-accumulation steps (the Trainer passes it).
""",
        """`TokenClassifierOutput` (a tuple with `return_dict=False`): `loss` (with `labels`); `logits`
    `(batch_size, sequence_length, num_labels)`; `hidden_states` and `attentions` when requested.""",
    )
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        global_attention_mask: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> TokenClassifierOutput | tuple:
        outputs = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              {"global_attention_mask": global_attention_mask, **attention_inputs})
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, self.config, num_items_in_batch=num_items_in_batch)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                       attentions=outputs.attentions)
        return self.returned(output, return_dict)


class HfeForQuestionAnswering(HfeHeadModel):
    auto_class = "AutoModelForQuestionAnswering"

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @forward_docstring(
        "Score each token as the start and the end of the answer span; with the span's positions, the loss.",
        """\
    start_positions (torch.LongTensor of shape (batch_size,), optional):
        Index of the answer's first token; positions past the input are ignored.
    end_positions (torch.LongTensor of shape (batch_size,), optional):
        Index of the answer's last token; positions past the input are ignored.
""",
        """`QuestionAnsweringModelOutput` (a tuple with `return_dict=False`): `loss` (with both positions);
    `start_logits` and `end_logits` `(batch_size, sequence_length)`; `hidden_states` and `attentions` when requested.""",
    )
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> QuestionAnsweringModelOutput | tuple:
        outputs = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                              output_attentions, output_hidden_states,
                              {"global_attention_mask": global_attention_mask, **attention_inputs})
        logits = self.qa_outputs(outputs.last_hidden_state)
        start_logits, end_logits = (x.squeeze(-1).contiguous() for x in logits.split(1, dim=-1))
        loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        output = QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                              hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return self.returned(output, return_dict)


class HfeForMultipleChoice(HfeHeadModel):
    auto_class = "AutoModelForMultipleChoice"
    add_pooling_layer = True

    def __init__(self, config: HfeConfig):
        super().__init__(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @forward_docstring(
        "Score each choice. Every input has shape `(batch_size, num_choices, sequence_length)` (`inputs_embeds`: "
        "`(batch_size, num_choices, sequence_length, hidden_size)`); with `labels`, the loss.",
        """\
    labels (torch.LongTensor of shape (batch_size,), optional):
        The index of the right choice of each example (cross-entropy over the choices).
""",
        """`MultipleChoiceModelOutput` (a tuple with `return_dict=False`): `loss` (with `labels`); `logits`
    `(batch_size, num_choices)`; `hidden_states` and `attentions` when requested.""",
    )
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        global_attention_mask: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **attention_inputs,
    ) -> MultipleChoiceModelOutput | tuple:
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]

        def flat(x: torch.Tensor | None, trailing: int = 1) -> torch.Tensor | None:
            return None if x is None else x.reshape(-1, *x.shape[-trailing:])

        outputs = self.encode(flat(input_ids), flat(attention_mask), flat(token_type_ids), flat(position_ids),
                              flat(inputs_embeds, 2), output_attentions, output_hidden_states,
                              {name: flat(value) for name, value in
                               {"global_attention_mask": global_attention_mask, **attention_inputs}.items()})
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)
        loss = F.cross_entropy(logits, labels.to(logits.device)) if labels is not None else None
        output = MultipleChoiceModelOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                           attentions=outputs.attentions)
        return self.returned(output, return_dict)

