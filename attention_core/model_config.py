"""A reranker's settings: :class:`RerankerConfig`, the named scorers, and how a checkpoint's saved settings read.

Kept apart from model.py so that what only reads a checkpoint's header (which model serves a store, its scorer's
name: served.py, ``nextpara info``) needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# the weight of the transition memory (transitions.py) for the general model, which no store's training fitted. On the
# validation splits (bench/results/successor_memory_offset_{peps,builtin,narrative}.md, paired), 4 raised the general
# model's MRR@10 on PEPs and the built-in docs beyond their intervals and the novels' inside theirs (+0.002); 8 and
# 16 raised PEPs' more and the built-in docs' less surely. On the test splits: bench/quality/README.md, "A memory of
# transitions"
GENERAL_MEMORY_BOOST = 4.0  # (a general model trained since fits its own, in its checkpoint: general.py)
POOL_NEIGHBOURS = 3  # features of a candidate's nearest in its list, with ``pool_neighbours`` (NextParagraphModel.pool)
# named scorer configurations (``nextpara train --scorer``): changes from RerankerConfig's defaults
SCORERS = {"full": {}, "fast": {"n_scorer_layers": 0, "candidate_tokens": False}}
SCORER_FIELDS = ("n_scorer_layers", "n_list_layers", "candidate_tokens", "pool_density")  # what names a scorer


@dataclass
class RerankerConfig:
    embed_dim: int = 384  # D: the store's embedding dimension (384 MiniLM, 1536 ada-002)
    d_model: int = 128  # width inside the model: 128 scored as 256 did, at half the cost (bench/quality/README.md)
    n_heads: int = 4  # heads of every attention layer
    n_context_layers: int = 2  # self-attention layers over the context
    n_scorer_layers: int = 1  # cross-attention layers, candidates -> context
    n_list_layers: int = 0  # self-attention layers over the candidate list (candidates see each other)
    max_context: int = 8  # context paragraphs the model reads; older ones are dropped
    dropout: float = 0.1  # on attention outputs and MLPs, training only
    mlp_ratio: int = 2  # hidden width of the MLPs, in multiples of d_model
    lexical: bool = True  # word-overlap features of the texts (lexical.py); checkpoints from before have False
    word_candidates: int = 0  # stage 1 also takes this many from the word index per query, for the last paragraph's
    #                           words and the whole context's (candidates.py); 0, as checkpoints from before: vectors only
    novel_words: bool = False  # word features of what the last paragraph adds (lexical.py); checkpoints from before: False
    pool_density: bool = True  # the candidate-pool density feature (a K x K product and top-k per query); False: 0
    candidate_tokens: bool = True  # each candidate's own vector, projected, feeds the score; False (with no scorer or
    #                                list layers): the score reads only the similarity and word features
    pool_neighbours: bool = False  # where a candidate stands among the others of its list (three features from the
    #                                pool's K x K cosines: POOL_NEIGHBOURS); checkpoints from before: False
    bilinear_last: bool = False  # a learned full-rank term last^T W candidate (D x D, from 0) added to the score: which
    #                              paragraphs follow which, beyond their cosine; checkpoints from before: False
    seam_feature: bool = False  # a word feature: each candidate's cosine to the last context paragraph's last sentence
    #                             (lexical.py); checkpoints from before: False
    seam_candidates: int = 0  # stage 1 also takes this many from the word index for that last sentence (candidates.py)
    list_norm: bool = False  # every similarity and word feature also as its z-score within the candidate list, so the
    #                          scorer reads where a candidate stands among the others, whatever a genre's cosine scale
    #                          (random pairs of novels' paragraphs at 0.25, PEPs' at 0.13: bench/results/cosine_scales.md)
    memory_boost: float = 0.0  # weight of a candidate's cosine to the transition memory's predicted next vector, added
    #                            to its score (transitions.py); above 0, stage 1 also adds that vector's nearest
    #                            (candidates.py); fitted on the validation split after training; 0: no memory at all

    @property
    def uses_word_index(self) -> bool:
        return bool(self.word_candidates or self.seam_candidates)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.novel_words and not self.lexical:
            raise ValueError("novel_words are word features: they need lexical")
        if not self.candidate_tokens and (self.n_scorer_layers or self.n_list_layers):
            raise ValueError("scorer and list layers read candidate tokens: candidate_tokens=False needs "
                             f"n_scorer_layers=0 and n_list_layers=0, not {self.n_scorer_layers} and {self.n_list_layers}")
        if self.pool_neighbours and not self.pool_density:
            raise ValueError("pool_neighbours are read from the pool's cosines: they need pool_density")
        if self.seam_feature and not self.lexical:
            raise ValueError("the seam feature is a word feature: it needs lexical")
        if not 0 <= self.memory_boost < float("inf"):
            raise ValueError(f"memory_boost ({self.memory_boost}) must be a finite number, 0 or more")
        if min(self.word_candidates, self.seam_candidates) < 0:
            raise ValueError(f"word_candidates ({self.word_candidates}) and seam_candidates ({self.seam_candidates}) "
                             "must be 0 or more")
        if min(self.embed_dim, self.d_model, self.n_heads, self.max_context) < 1:
            low = [f"{k} {v}" for k, v in (("embed_dim", self.embed_dim), ("d_model", self.d_model),
                                            ("n_heads", self.n_heads), ("max_context", self.max_context)) if v < 1]
            raise ValueError(f"{', '.join(low)}: must be at least 1")

    @property
    def n_features(self) -> int:
        """Columns of the features the scorer reads (list_norm: each twice, raw and as its z-score in the list)."""
        return self.n_raw_features * (2 if self.list_norm else 1)

    @property
    def n_raw_features(self) -> int:
        return (self.max_context + 5 + (POOL_NEIGHBOURS if self.pool_neighbours else 0)
                + (self.n_word_features if self.lexical else 0))

    @property
    def n_word_features(self) -> int:
        from . import lexical  # (numpy and scipy: only a model that is built asks)

        return lexical.n_features(self.max_context, self.novel_words, self.seam_feature)


# model settings added since the first checkpoints, at the value every model had before each existed: a checkpoint that
# lacks one is read with that value (saved_config), and one is written only when it differs from it (so older versions
# read the rest). Not RerankerConfig's defaults, so a default can change without changing how an older checkpoint reads.
LATER_FIELDS = {"word_candidates": 0, "novel_words": False, "pool_density": True, "candidate_tokens": True,
                "pool_neighbours": False, "bilinear_last": False, "seam_feature": False, "seam_candidates": 0,
                "list_norm": False, "memory_boost": 0.0}


def memory_weight(meta: dict, general: bool) -> float:
    """The transition memory's weight that a checkpoint serves with (``meta``: its metadata): the one its training
    fitted, 0 included; for a general model (one trained on a mixture, which no store's training fits) trained before
    the memory, so with no weight fitted, GENERAL_MEMORY_BOOST. (A weight of 0 is not written in ``model_config``:
    whether one was fitted is in the training's record, ``meta["training"]["memory_boost"]``.)"""
    weight = float(saved_config(meta.get("model_config", {}))["memory_boost"])
    if weight or not general:
        return weight
    return GENERAL_MEMORY_BOOST if meta.get("training", {}).get("memory_boost") is None else 0.0


def saved_config(config: dict) -> dict:
    """A checkpoint's ``model_config`` with what it lacks filled in: LATER_FIELDS' values, and lexical False (the
    oldest checkpoints had no word features)."""
    return {"lexical": False, **LATER_FIELDS, **config}


def scorer_name(config: dict) -> str:
    """The SCORERS name of a model config (a checkpoint's ``model_config``: a field it lacks read as saved_config
    reads it), or "custom" for another mix of the fields that make a scorer."""
    default = RerankerConfig()
    config = saved_config(config)
    have = {k: config.get(k, getattr(default, k)) for k in SCORER_FIELDS}
    for name, changes in SCORERS.items():
        if have == {k: changes.get(k, getattr(default, k)) for k in SCORER_FIELDS}:
            return name
    return "custom"


def store_model_config(dim: int, max_context: int, changes: dict | None = None) -> RerankerConfig:
    """The settings of a model for a store of dimension ``dim`` reading ``max_context`` paragraphs, with ``changes``
    (a scorer's, the command line's); InvalidInputError saying which setting is wrong."""
    from nextpara.errors import InvalidInputError

    try:
        return RerankerConfig(**{"embed_dim": dim, "max_context": max_context, **(changes or {})})
    except ValueError as e:
        raise InvalidInputError(f"model settings: {e}") from e
