"""NextParagraphModel: attention over a sequence of paragraph embeddings.

The mechanism is the textbook one, softmax(Q K^T / sqrt(d_k)) V with learned W_Q, W_K, W_V,
several heads concatenated and projected, applied to a sequence whose tokens are paragraph
embeddings:

* a **context encoder** (pre-norm transformer layers, multi-head self-attention) reads the
  context paragraphs, each with a position embedding (distance from the end), and outputs a
  **query vector** in embedding space: the predicted next paragraph. It starts as
  ``cos(last) + 0.5 cos(mean of context)`` (a residual on what cosine already knows) and learns
  a correction; FAISS searches with it.
* a **scorer** in which every candidate attends to the encoded context (cross-attention;
  candidates never see each other's tokens) and gets one score: the query's cosine plus an MLP
  over the attended context and similarity features (cosine to each context paragraph, to the
  query, the pool's density around the candidate). The cross-attention weights over context
  positions, per head, are what a caller sees as "which paragraphs drove the choice".
  The ``fast`` scorer (model_config.SCORERS) has no cross-attention and no candidate token (the candidate's vector
  enters only through its cosines): an MLP over the similarity features (the pool density among them)
  and the word features, half the cost, and no attention weights to show. On the three corpora's
  validation splits it scored as the full one does (bench/speed/batch.md, A cheaper scorer); without the
  pool density too it lost about 0.01 MRR@10.
  With ``n_list_layers`` > 0 the candidates then attend to each other (self-attention over the
  list), so a candidate's score can depend on the company it keeps in the list.
  With ``bilinear_last`` a learned D x D matrix W adds last^T W candidate to every score: a full-rank, asymmetric
  reading of which paragraph vectors follow which (cosine is symmetric; the scorer sees the pair through d-wide
  projections). Off by default: it moved no corpus's validation figures (bench/quality/README.md, Direction).
  With ``lexical`` the features also hold word overlap (TF-IDF cosines) between the candidate's
  text and the context's (lexical.py), through the MLP and a direct linear term; the IDF vector is
  a buffer of the model, so the checkpoint carries it.
  With ``list_norm`` the scorer reads every similarity and word feature twice, as it is and as its z-score among
  the candidates of its list (:func:`list_z`), so a genre whose cosines sit elsewhere reads the same. The general
  model that serves stores without their own has it: it helped a general model on a genre it never saw (the
  novels), and trained on all three corpora it scored at or above the model without it. Off by default in training:
  the built-in docs' own model fine-tuned from it fell behind one fine-tuned without it (paired validation MRR@10
  -0.013 and -0.003, two seeds; PEPs and the novels level), so `nextpara train` starts from the general model's
  twin without it (general.py; bench/quality/general_model.md, Features read against their own list).

Notation used for tensor shapes: B batch, L context length (right-aligned, padding first),
K candidates, D embedding dimension, d model width, h heads, hs = d / h.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import lexical
from .model_config import RerankerConfig

POOL_TOP = 20  # neighbours in the candidate pool used for the density feature


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None):
    """softmax(Q K^T / sqrt(d_k)) V, written out. q (B,h,Tq,hs), k/v (B,h,Tk,hs), mask (B,1|h,Tq,Tk) True=attend."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights  # (B, h, Tq, hs), (B, h, Tq, Tk)


class MultiHeadAttention(nn.Module):
    def __init__(self, d: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k, self.w_v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.w_o = nn.Linear(d, d)
        self.dropout = dropout

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        """x_q (B,Tq,d), x_kv (B,Tk,d), mask (B,Tq,Tk) True=attend -> (B,Tq,d), weights (B,h,Tq,Tk) or None."""
        B, Tq, d = x_q.shape
        Tk = x_kv.shape[1]
        hs = d // self.n_heads
        q = self.w_q(x_q).view(B, Tq, self.n_heads, hs).transpose(1, 2)  # (B, h, Tq, hs)
        k = self.w_k(x_kv).view(B, Tk, self.n_heads, hs).transpose(1, 2)  # (B, h, Tk, hs)
        v = self.w_v(x_kv).view(B, Tk, self.n_heads, hs).transpose(1, 2)  # (B, h, Tk, hs)
        m = mask[:, None] if mask is not None else None  # (B, 1, Tq, Tk)
        if need_weights:
            out, weights = reference_attention(q, k, v, m)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=self.dropout if self.training else 0.0)
            weights = None
        out = out.transpose(1, 2).reshape(B, Tq, d)  # (B, Tq, d): heads concatenated
        return self.w_o(out), weights


class Block(nn.Module):
    """Pre-norm attention + MLP; self-attention when x_kv is None, else cross-attention."""

    def __init__(self, cfg: RerankerConfig):
        super().__init__()
        d = cfg.d_model
        self.ln_q, self.ln_kv, self.ln_mlp = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = MultiHeadAttention(d, cfg.n_heads, cfg.dropout)
        self.mlp = nn.Sequential(nn.Linear(d, cfg.mlp_ratio * d), nn.GELU(), nn.Linear(cfg.mlp_ratio * d, d),
                                 nn.Dropout(cfg.dropout))

    def forward(self, x, x_kv=None, mask=None, need_weights=False):
        q = self.ln_q(x)
        kv = q if x_kv is None else self.ln_kv(x_kv)
        a, weights = self.attn(q, kv, mask, need_weights)
        x = x + a
        return x + self.mlp(self.ln_mlp(x)), weights


class NextParagraphModel(nn.Module):
    def __init__(self, cfg: RerankerConfig):
        super().__init__()
        self.cfg = cfg
        d, D, L = cfg.d_model, cfg.embed_dim, cfg.max_context
        self.in_proj = nn.Linear(D, d)
        self.pos_emb = nn.Embedding(L, d)  # index = distance from the end of the context
        self.type_emb = nn.Embedding(2, d)  # 0 context, 1 candidate
        self.encoder = nn.ModuleList(Block(cfg) for _ in range(cfg.n_context_layers))
        self.ln_enc = nn.LayerNorm(d)
        self.query_out = nn.Linear(d, D)
        nn.init.zeros_(self.query_out.weight)
        nn.init.zeros_(self.query_out.bias)
        self.mix = nn.Parameter(torch.tensor([1.0, 0.5]))  # weights of last and mean context in the query
        self.scorer = nn.ModuleList(Block(cfg) for _ in range(cfg.n_scorer_layers))
        self.feat_proj = nn.Linear(cfg.n_features, d)
        # optional: the candidates, each already informed by the context and its features, read each other
        self.list_blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_list_layers))
        width = 2 * d if cfg.candidate_tokens else d  # [candidate token; features] or the features alone
        self.score_mlp = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, d), nn.GELU(), nn.Linear(d, 1))
        nn.init.zeros_(self.score_mlp[-1].weight)  # an untrained scorer ranks by cos(query, candidate)
        nn.init.zeros_(self.score_mlp[-1].bias)
        self.query_scale = nn.Parameter(torch.tensor(20.0))  # logit scale of cos(query, candidate)
        if cfg.bilinear_last:
            self.bilinear = nn.Parameter(torch.zeros(D, D))  # an untrained term adds 0
        if cfg.lexical:
            self.register_buffer("lexicon_idf", torch.zeros(lexical.N_BUCKETS))  # set by training, saved with it
            # weight of the TF-IDF cosine to the last paragraph added to the scores, fitted on the validation
            # split after training (training.py: tune_lexical_boost)
            self.register_buffer("lexical_boost", torch.zeros(()))
            self.lexical_linear = nn.Linear(cfg.n_word_features, 1)  # a direct path: overlap adds to the score
            nn.init.zeros_(self.lexical_linear.weight)
            nn.init.zeros_(self.lexical_linear.bias)

    def encode(self, context: torch.Tensor, context_mask: torch.Tensor):
        """context (B,L,D), context_mask (B,L) True=real -> query (B,D) unit vectors, states (B,L,d)."""
        B, L, _ = context.shape
        if L > self.cfg.max_context:
            raise ValueError(f"context length {L} exceeds max_context ({self.cfg.max_context})")
        distance = torch.arange(L - 1, -1, -1, device=context.device)  # (L,)
        x = self.in_proj(context) + self.pos_emb(distance)[None] + self.type_emb.weight[0]  # (B, L, d)
        attend = context_mask[:, None, :].expand(B, L, L)  # (B, L, L): keys that are real
        for block in self.encoder:
            x, _ = block(x, mask=attend)
        x = self.ln_enc(x)
        query = self.query_base(context, context_mask) + self.query_out(x[:, -1])  # (B, D)
        return F.normalize(query, dim=-1), x

    def query_base(self, context: torch.Tensor, context_mask: torch.Tensor) -> torch.Tensor:
        """(B,D) what the query starts from, before the encoder's correction: the learned mix of the last context
        paragraph and the context's mean."""
        n = context_mask.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
        mean = (context * context_mask[..., None]).sum(1) / n  # (B, D)
        return self.mix[0] * context[:, -1] + self.mix[1] * mean

    def features(self, context, context_mask, candidates, candidate_mask, query):
        """Similarity features per candidate (B,K,L+5; L+8 with pool_neighbours), computed in embedding space."""
        cos_ctx = (candidates @ context.transpose(1, 2)) * context_mask[:, None, :]  # (B, K, L)
        cos_q = candidates @ query[:, :, None]  # (B, K, 1); a batched product, not a (B, K, D) temporary
        masked = cos_ctx.masked_fill(~context_mask[:, None, :], -1.0)
        max_ctx = masked.max(-1, keepdim=True).values  # (B, K, 1)
        mean_ctx = cos_ctx.sum(-1, keepdim=True) / context_mask.sum(1).clamp(min=1)[:, None, None]  # (B, K, 1)
        others = masked[..., :-1].max(-1, keepdim=True).values if masked.shape[-1] > 1 else torch.zeros_like(max_ctx)
        margin = cos_ctx[..., -1:] - others  # (B, K, 1): closer to the last than to any earlier paragraph
        pool = [torch.zeros_like(max_ctx)]
        if self.cfg.pool_density:
            pool = self.pool(candidates, candidate_mask, cos_ctx[..., -1] if self.cfg.pool_neighbours else None)
        pad = self.cfg.max_context - cos_ctx.shape[-1]
        cos_ctx = F.pad(cos_ctx, (pad, 0))  # (B, K, max_context): right-aligned like the context
        return torch.cat([cos_ctx, cos_q, max_ctx, mean_ctx, margin, *pool], dim=-1)

    @staticmethod
    def pool(candidates, candidate_mask, to_last=None):
        """Where each candidate stands in its own list, from the list's K x K cosines; padding and the candidate itself
        are -inf and left out, so a score never depends on what else is batched. Returns [density]: (B,K,1) the mean
        cosine to its POOL_TOP nearest others; with ``to_last`` (B,K), each candidate's cosine to the last context
        paragraph, three more (B,K,1) (model_config.POOL_NEIGHBOURS): its largest cosine to another candidate, ``to_last`` minus that,
        and log(1 + the number of candidates closer to it than the last context paragraph is). The paragraph after the
        context has the last context paragraph among its nearest; a far paragraph of the same document has its own
        neighbours closer (bench/quality/README.md, Direction)."""
        K = candidates.shape[1]
        cosines = candidates @ candidates.transpose(1, 2)  # (B, K, K)
        neighbours = candidate_mask[:, None, :] & ~torch.eye(K, dtype=torch.bool, device=cosines.device)  # (B, K, K)
        others = cosines.masked_fill(~neighbours, float("-inf"))
        n = min(POOL_TOP, max(K - 1, 1))
        if to_last is None and not others.requires_grad:  # the density needs the n largest in no order: NumPy's
            # selection finds them in about half torch's top-k time for 256 lists of 100, 0.6x for a served batch of 16
            # (bench/results/scorer_kernels.md)
            top = torch.from_numpy(np.partition(others.numpy(), K - n, axis=-1)[..., K - n:])  # (B, K, n)
        else:
            top = others.topk(n, dim=-1, sorted=to_last is not None).values  # (B, K, n)
        real = torch.isfinite(top)
        density = top.masked_fill(~real, 0.0).sum(-1, keepdim=True) / real.sum(-1, keepdim=True).clamp(min=1)
        if to_last is None:
            return [density]
        nearest = top[..., :1].masked_fill(~real[..., :1], 0.0)  # (B, K, 1): 0 for a list of one
        closer = (others > to_last[..., None]).sum(-1, keepdim=True)  # (B, K, 1)
        return [density, nearest, to_last[..., None] - nearest, torch.log1p(closer.float())]

    def forward(self, context, context_mask, candidates, candidate_mask, need_weights: bool = False,
                lexical_features: torch.Tensor | None = None):
        """Score candidates (B,K,D) for context (B,L,D); ``lexical_features`` (B,K,cfg.n_word_features) when
        cfg.lexical (None: no texts, all zero).

        Returns dict: ``query`` (B,D), ``scores`` (B,K) (-inf where candidate_mask is False),
        ``attention`` (B,h,K,L) from the last scorer layer when need_weights (None: no scorer layer).
        """
        query, ctx_states = self.encode(context, context_mask)
        return self.score(query, ctx_states, context, context_mask, candidates, candidate_mask, need_weights,
                          lexical_features)

    def score(self, query, ctx_states, context, context_mask, candidates, candidate_mask, need_weights: bool = False,
              lexical_features: torch.Tensor | None = None):
        """:meth:`forward` for a context already encoded: ``query`` (B,D) and ``ctx_states`` (B,L,d) from
        :meth:`encode`, so a caller that searched with the query does not encode the context again."""
        B, K, _ = candidates.shape
        feats = self.features(context, context_mask, candidates, candidate_mask, query)  # (B, K, F)
        if self.cfg.lexical:
            if lexical_features is None:
                lexical_features = candidates.new_zeros(B, K, self.cfg.n_word_features)
            feats = torch.cat([feats, lexical_features], dim=-1)
        f = self.feat_proj(torch.cat([feats, list_z(feats, candidate_mask)], -1) if self.cfg.list_norm else feats)
        weights = None
        if self.cfg.candidate_tokens:
            c = self.in_proj(candidates) + self.type_emb.weight[1]  # (B, K, d)
            attend = context_mask[:, None, :].expand(B, K, context.shape[1])  # (B, K, L)
            for block in self.scorer:
                c, weights = block(c, ctx_states, mask=attend, need_weights=need_weights)
            if len(self.list_blocks):
                c = c + f
                among = candidate_mask[:, None, :].expand(B, K, K)  # (B, K, K): keys that are real candidates
                for block in self.list_blocks:
                    c, _ = block(c, mask=among)
            h = torch.cat([c, f], dim=-1)  # (B, K, 2d)
        else:
            h = f  # (B, K, d)
        scores = self.query_scale * feats[..., self.cfg.max_context] + self.score_mlp(h).squeeze(-1)  # (B, K)
        if self.cfg.bilinear_last:
            scores = scores + (candidates @ (context[:, -1] @ self.bilinear)[:, :, None]).squeeze(-1)  # (B, K)
        if self.cfg.lexical:
            last = lexical_features[..., self.cfg.max_context - 1]  # (B, K): cosine to the last paragraph's words
            scores = scores + self.lexical_linear(lexical_features).squeeze(-1) + self.lexical_boost * last
        scores = scores.masked_fill(~candidate_mask, float("-inf"))
        return {"query": query, "scores": scores, "attention": weights}


def list_z(feats: torch.Tensor, candidate_mask: torch.Tensor) -> torch.Tensor:
    """(B,K,F) features as z-scores within each list's real candidates (0 for padding, and for a column all alike)."""
    real = candidate_mask[..., None].to(feats.dtype)  # (B, K, 1)
    n = real.sum(1, keepdim=True).clamp(min=1)
    mean = (feats * real).sum(1, keepdim=True) / n
    centred = (feats - mean) * real
    sd = (centred.square().sum(1, keepdim=True) / n).sqrt()
    return centred / (sd + 1e-4)
