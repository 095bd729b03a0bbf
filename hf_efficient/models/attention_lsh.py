"""Reformer's LSH attention (Kitaev et al. 2020): shared-QK attention within chunks of bucket-sorted tokens.

Per hashing round, queries are hashed by a random rotation (angular LSH: bucket = argmax of
[xR, -xR]), tokens are sorted by (bucket, position) with padding last, and the sorted sequence runs
through the local-attention kernel with attention to self excluded. Rounds are merged with weights
softmax over rounds of each round's logsumexp, so the result is a softmax over the union of the
rounds' targets (a key found in several rounds counts once per round, as in the paper).
"""

import torch
from torch import nn

from .attention import defaults_of, register_attention
from .attention_chunked_local import ChunkedLocalAttention, chunked_attention, dense_weights
from .configuration_reformer import HfeReformerConfig

# Above this many buckets the derived bucket count is hashed as two factors (rotation size 2 * sqrt).
MAX_UNFACTORED_BUCKETS = 64


def shared_key(query: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Keys of shared-QK attention: the queries scaled to length sqrt(head_dim) (so scores are q . k / ||k||)."""
    return query * torch.rsqrt(query.float().pow(2).mean(-1, keepdim=True) + eps).to(query.dtype)


def bucket_factors(num_buckets: int | list[int] | None, length: int, chunk_length: int) -> list[int]:
    """The bucket count as a list of even factors hashed separately; derived from the length when None."""
    if num_buckets is not None:
        return [num_buckets] if isinstance(num_buckets, int) else list(num_buckets)
    exponent = max(1, (2 * length // chunk_length).bit_length() - 1)
    if 2**exponent <= MAX_UNFACTORED_BUCKETS:
        return [2**exponent]
    return [2 ** (exponent // 2), 2 ** (exponent - exponent // 2)]


def take_rows(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Rows of x [batch, heads, L, d] (or [batch, heads, rounds, L, d]) in `order` [batch, heads, rounds, L]
    -> [batch, heads, rounds, L, d]. Indexing moves whole rows (faster than an element-wise gather)."""
    batch, heads, rounds, _ = order.shape
    index = [torch.arange(batch, device=order.device)[:, None, None, None],
             torch.arange(heads, device=order.device)[:, None, None]]
    if x.dim() == 5:
        index.append(torch.arange(rounds, device=order.device)[:, None])
    return x[(*index, order)]


@register_attention("lsh")
class LSHAttention(ChunkedLocalAttention):
    """Shared-QK LSH attention; weights [batch, heads, length, length], rounds summed with their merge weights.

    Exact shared-QK dense attention (without attention to self) on short sequences, see `ChunkedLocalAttention`.
    """

    exclude_self = True
    config_defaults = defaults_of(HfeReformerConfig, "lsh_chunk_length", "lsh_num_chunks_before",
                                  "lsh_num_chunks_after", "num_hashes", "num_buckets", "hash_seed",
                                  "full_attention_max_length", "is_decoder")
    chunk_fields = ("lsh_chunk_length", "lsh_num_chunks_before", "lsh_num_chunks_after")

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        del self.key  # shared QK: keys are derived from the queries
        self.num_hashes = self.option(config, "num_hashes")
        # (seed, shape) -> eval-mode rotations, see `seeded_rotations`.
        self.eval_rotations: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}

    @property
    def num_buckets(self) -> int | list[int] | None:
        return self.option(self.config, "num_buckets")

    @property
    def hash_seed(self) -> int:
        # Read when drawing, so that a changed seed takes effect at the next `model.eval()` (see `train`).
        return self.option(self.config, "hash_seed")

    @classmethod
    def check_config(cls, config, layer_idx: int) -> None:
        super().check_config(config, layer_idx)
        if cls.option(config, "num_hashes") <= 0:
            raise ValueError(f"`num_hashes` must be positive, got {cls.option(config, 'num_hashes')}.")
        num_buckets = cls.option(config, "num_buckets")
        factors = [num_buckets] if isinstance(num_buckets, int) else num_buckets or []
        if any(factor < 2 or factor % 2 for factor in factors) or num_buckets == []:
            raise ValueError(f"`num_buckets` must be an even number >= 2 or a list of them, got {num_buckets}.")

    def choose_path(self, length, output_attentions, exporting):
        if exporting and self.num_buckets is None:
            raise ValueError(
                "`num_buckets=None` derives the bucket count from the input length, which torch.export makes symbolic: "
                "set `num_buckets` (e.g. to the count used at your usual length) before exporting."
            )
        return super().choose_path(length, output_attentions, exporting)

    def project_qkv(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        query = self.split_heads(self.query(hidden_states))
        return query, shared_key(query), self.split_heads(self.value(hidden_states))

    def train(self, mode: bool = True) -> "LSHAttention":
        """Switching to eval mode draws the eval rotations (their shape is known when `num_buckets` is set), outside
        any trace: an exported program then holds them as constants instead of a generator call it would replay."""
        super().train(mode)
        if not mode and self.num_buckets is not None:  # then the length (0 here) does not matter
            self.seeded_rotations(self.rotation_shape(bucket_factors(self.num_buckets, 0, self.chunk_length)))
        return self

    def rotation_shape(self, factors: list[int]) -> tuple[int, int, int, int]:
        """[heads, head_dim, rounds, sum of bucket factors / 2]: one rotation per head and round, all factors side by side."""
        return self.num_heads, self.head_dim, self.num_hashes, sum(factors) // 2

    def seeded_rotations(self, shape: tuple[int, ...], exporting: bool = False) -> torch.Tensor:
        """The eval-mode rotations of this shape (fp32, CPU): drawn once from a generator seeded with `hash_seed` +
        layer index, then reused."""
        key = (self.hash_seed + self.layer_idx, shape)
        if key not in self.eval_rotations:
            if exporting:
                raise ValueError(
                    f"LSH layer {self.layer_idx} has no eval-mode rotations of shape {shape} for seed {key[0]}: they are "
                    "drawn when the model switches to eval mode; call `model.eval()` before exporting (again after "
                    "changing `hash_seed` or `num_buckets`)."
                )
            # On the CPU even under a default-device context (a model built on the meta device, then materialised):
            # the cache is no buffer, so it would stay on that device.
            self.eval_rotations[key] = torch.randn(shape, generator=torch.Generator().manual_seed(key[0]), device="cpu")
        return self.eval_rotations[key]

    def rotations(self, shape: tuple[int, ...], like: torch.Tensor, exporting: bool) -> torch.Tensor:
        """Random rotations: from the global RNG in training (replayed by recomputing backward passes),
        seeded in eval (deterministic, see `seeded_rotations`)."""
        if self.training:
            return torch.randn(shape, device=like.device, dtype=like.dtype)
        return self.seeded_rotations(shape, exporting).to(like.device, like.dtype)

    def hash(self, vectors: torch.Tensor, attention_mask: torch.Tensor | None, exporting: bool = False) -> torch.Tensor:
        """Bucket of every token in every round, [batch, heads, rounds, L]; padding gets the bucket after the last."""
        factors = bucket_factors(self.num_buckets, vectors.shape[2], self.chunk_length)
        rotated = torch.einsum("bhld,hdrk->bhrlk", vectors.detach(), self.rotations(self.rotation_shape(factors), vectors, exporting))
        buckets, stride = 0, 1
        for factor, part in zip(factors, rotated.split([factor // 2 for factor in factors], dim=-1), strict=True):
            buckets = buckets + stride * torch.cat([part, -part], dim=-1).argmax(dim=-1)
            stride *= factor
        if attention_mask is not None:
            buckets = buckets.masked_fill(~attention_mask[:, None, None, :], stride)
        return buckets

    def chunk_projections(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:
        """Query and value; the keys come from the sorted queries (`chunked`)."""
        return self.split_heads(self.query(hidden_states)), None, self.split_heads(self.value(hidden_states))

    def chunked(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool,
        exporting: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per round: hash, sort by (bucket, position), chunked attention, sort back; then merge the rounds.
        `key` is not read: the keys are the sorted queries' `shared_key`."""
        length = query.shape[2]
        # Token at each sorted slot: sorted by (bucket, position) through unique keys, as a stable sort would
        # (torch.onnx cannot convert a stable sort).
        positions = torch.arange(length, device=query.device)
        order = torch.argsort(self.hash(query, attention_mask, exporting) * length + positions, dim=-1)
        key_mask = None
        if attention_mask is not None:  # padding is sorted last: slots past a row's real tokens are padding
            key_mask = positions < attention_mask.sum(-1)[:, None, None, None]
        sorted_query = take_rows(query, order)
        context, logsumexp, probs, window_positions = chunked_attention(
            self, sorted_query, shared_key(sorted_query), take_rows(value, order), order, key_mask,
            self.chunk_length, self.chunks_before, self.chunks_after, self.exclude_self, self.causal,
            with_logsumexp=self.num_hashes > 1, exporting=exporting,
        )
        undo = torch.empty_like(order).scatter_(-1, order, positions.expand_as(order))
        context = take_rows(context, undo)
        if self.num_hashes == 1:
            weights = dense_weights(probs, order, window_positions, length) if output_attentions else None
            return self.merge_heads(context[:, :, 0]), weights
        round_weights = nn.functional.softmax(logsumexp.gather(3, undo), dim=2)  # [batch, heads, rounds, L]
        context = self.merge_heads((context * round_weights[..., None].to(context.dtype)).sum(2))
        if not output_attentions:
            return context, None
        probs = probs * round_weights.gather(3, order).unflatten(-1, (-1, self.chunk_length))[..., None]
        return context, dense_weights(probs, order, window_positions, length)
