"""Training the NextParagraphModel on a store: ``nextpara train``.

Data: (up to L preceding paragraphs -> next paragraph) from training documents only (the
fixed split rule, sequences.py). A paragraph whose text equals the target's is a positive,
never a negative; the context and paragraphs with the context's texts are excluded everywhere.

Phase 1, the query head: InfoNCE of the query vector against *every* paragraph of the store
(a full softmax over N; at 44K paragraphs this is cheap on a CPU), so every same-document
paragraph, every near-duplicate from other documents is a negative at once, weighted by how
hard it is. Phase 2, the scorer: candidates are mined exactly as inference mines them
(candidates.py: FAISS with the phase-1 query head and the last paragraph, and the word index when the
model config asks for ``word_candidates`` or ``seam_candidates``); queries whose list holds a positive train a
listwise InfoNCE over the list (no target is inserted: inserting it into a list selected for
high cosine teaches that high cosine is wrong), plus the phase-1 loss to keep the query head, and with
``near_weight`` a second listwise term whose positives are the target and the ``near_window`` paragraphs after
it (positions label the training lists; the model still reads only content).
Early stopping on validation MRR@10 of the whole pipeline. Deterministic under a seed.

With word-overlap features (lexical.py, on by default) the IDF vector is fitted on the training
split's texts first (never on the documents validation or test queries come from); phase 2 hides the texts of ``text_dropout`` of its queries (raw-vector callers have
none); after early stopping, one weight of the words' cosine to the last paragraph is fitted on
the validation lists (tune_lexical_boost). Then, for any model, the weight of the transition memory
(transitions.py: where the training documents' paragraphs like the last one led) on the same lists, widened by the
memory's candidates for every weight above 0, as they serve with it (tune_memory_boost). With ``train_memory_weight``
(off by default: on PEPs it ranked as training without it, bench/quality/README.md) phase 2 already scores its lists
beside the memory's term at that weight, on lists widened by its candidates, each training query predicted from the
other documents' transitions (TransitionMemory.predict_leaving_out: its own document's hold its target's step).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, replace
from functools import cached_property

import numpy as np
import torch
from nextpara.errors import FailedPreconditionError
from nextpara.progress import progress_bar
from nextpara.store.store import ParagraphStore

from . import lexical, transitions
from .candidates import word_sources
from .metrics import hit_rank, per_query, summarize
from .model import NextParagraphModel
from .model_config import RerankerConfig
from .pipeline import RerankPipeline, pad_candidates, pad_contexts
from .sequences import ParagraphSequences, Query
from .train_config import TrainConfig

log = logging.getLogger(__name__)
LEXICAL_BOOSTS = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)  # grid of tune_lexical_boost
MEMORY_BOOSTS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # grid of tune_memory_boost (16 was the largest until 2026-12-05)
STORE_FITTED = ("lexicon_idf", "lexical_boost")  # fitted to the store trained on, never taken from a starting model


def context_batch(seq: ParagraphSequences, contexts: list[np.ndarray], L: int):
    """Right-aligned (B,L,D) tensor of the context rows' vectors and its (B,L) mask."""
    return pad_contexts([seq.vectors[rows] for rows in contexts], L)


def candidate_batch(seq: ParagraphSequences, lists: list[np.ndarray]):
    """(B,K,D) candidate vectors with (B,K) mask, K the longest list."""
    return pad_candidates([seq.vectors[rows] for rows in lists])


def clearly_more(start: np.ndarray, new: np.ndarray) -> tuple[bool, float]:
    """Whether the per-query hits ``new`` (bool, one per validation query) beat ``start``'s on the same queries by
    more than twice the standard error of the paired gain, and that standard error (inf for one query). Roughly a
    one-sided 98% test for one comparison; the trial compares the best of its epochs on the same queries, so it
    keeps a head that found no more targets somewhat more often than that."""
    gain = new.astype(np.float64) - start
    se = float(gain.std(ddof=1) / np.sqrt(len(gain))) if len(gain) > 1 else float("inf")
    return bool(gain.mean() > 2 * se), se


class TooLittleData(ValueError):
    """The store holds too few documents for a training split and a validation split."""


def multi_positive_nce(logits: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """-log( sum softmax over positives ), averaged; logits (B,K) with -inf for excluded."""
    pos = logits.masked_fill(~positive, float("-inf"))
    return (torch.logsumexp(logits, -1) - torch.logsumexp(pos, -1)).mean()


class Trainer:
    def __init__(self, store: ParagraphStore, seq: ParagraphSequences, model_cfg: RerankerConfig, cfg: TrainConfig,
                 quiet: bool = False, init_state: dict | None = None, idf_groups: np.ndarray | None = None):
        """``init_state``: weights to start from (the general model's fine-tuning start's: fine-tuning), except what is
        fitted to a store: its word weights, and the lexical boost (fitted on this store's validation split after
        training, as from scratch; the start's, 8, was fitted on its mixture, and the fitting could only add to it);
        ``idf_groups``: a group per row (a corpus of a mixture), each group's word weights fitted on its own
        training rows, as a store serving one corpus fits its own (general.py)."""
        self.store, self.seq, self.cfg, self.quiet = store, seq, cfg, quiet
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        if model_cfg.uses_word_index and not store.words.available:
            raise FailedPreconditionError(f"{store.data_dir} has no word index for --word-candidates or --seam: open it "
                                          "once for writing first (nextpara build with the same corpus adds it)")
        self.model = NextParagraphModel(replace(model_cfg, memory_boost=0.0))  # fitted after training
        self.started_from_weights = init_state is not None
        if init_state is not None:
            start = {k: v for k, v in init_state.items() if k not in STORE_FITTED}
            if cfg.init_shrink < 1.0:  # towards this model's own fresh initialisation (TrainConfig.init_shrink)
                fresh = self.model.state_dict()
                start = {k: cfg.init_shrink * v + (1.0 - cfg.init_shrink) * fresh[k]
                         if k in fresh and v.is_floating_point() else v for k, v in start.items()}
            self.model.load_state_dict(start, strict=False)
        self.all_vectors = torch.from_numpy(seq.vectors)  # (N, D)
        # a target whose text repeats a context paragraph is excluded with it: nothing to learn from
        self.train_q = [q for q in seq.queries("train", cfg.max_context, limit=cfg.max_train_queries or None, seed=cfg.seed)
                        if seq.text_class[q.target] not in seq.text_class[q.context]]
        self.val_q = seq.queries("validation", cfg.max_context, limit=cfg.val_queries, seed=cfg.seed + 1)
        if not self.train_q or not self.val_q:
            raise TooLittleData(f"too little data to train: {len(self.train_q)} training and {len(self.val_q)} "
                             "validation queries (the split rule puts 80% / 10% of documents in each)")
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.words = None  # (N, buckets) TF-IDF rows of every paragraph, when the model reads texts
        self.seam_words = None  # (N, buckets) the rows of their last sentences, for the seam feature
        texts = None  # every paragraph's text, by row, when the model reads them or mines with the word index
        if model_cfg.lexical or model_cfg.uses_word_index:
            texts = [p.text for p in store.get_paragraphs([int(i) for i in seq.ids])]
        self.texts = texts
        self._word_lists: dict[tuple, list] = {}  # a query's context rows -> its word index results (_word_results)
        if model_cfg.lexical:
            # IDF from the training split alone: a word seen only in validation or test documents weighs what a word
            # of a document added after training would (the most: lexical.Lexicon.fit), not what the split says
            groups = np.zeros(len(seq), np.int64) if idf_groups is None else np.asarray(idf_groups)
            train_rows = seq.split_rows("train")
            rows = [lexical.EMPTY_ROW] * len(seq)
            seam_rows = [lexical.EMPTY_ROW] * len(seq)
            for g in np.unique(groups):
                lexicon = lexical.Lexicon.fit([texts[r] for r in train_rows[groups[train_rows] == g]])
                for r in np.flatnonzero(groups == g):
                    rows[r] = lexicon.weigh(texts[r]) if texts[r] else lexical.EMPTY_ROW
                    if model_cfg.seam_feature and texts[r]:
                        seam_rows[r] = lexicon.weigh(lexical.last_sentence(texts[r]))
            self.words = lexical.stack(rows)
            if model_cfg.seam_feature:
                self.seam_words = lexical.stack(seam_rows)
            if idf_groups is None:  # one corpus: the checkpoint carries its word weights (a mixture's: general.py)
                self.model.lexicon_idf.copy_(torch.from_numpy(lexicon.idf))

    # ---- helpers -------------------------------------------------------------------------
    def _exclusions(self, q: Query) -> np.ndarray:
        return self.seq.same_text_rows(q.context)

    def _contexts(self, batch: list[Query], train: bool) -> list[np.ndarray]:
        out = []
        for q in batch:
            ctx = q.context
            if train and len(ctx) > 1 and self.rng.random() < self.cfg.truncate_prob:
                ctx = ctx[-int(self.rng.integers(1, len(ctx))):]
            out.append(ctx)
        return out

    def _query_loss(self, query: torch.Tensor, batch: list[Query]) -> torch.Tensor:
        excluded = np.zeros((len(batch), len(self.seq)), bool)  # built in numpy: in-place edits of
        positive = np.zeros((len(batch), len(self.seq)), bool)  # a tensor in the graph copy it each time
        for i, q in enumerate(batch):
            excluded[i, self._exclusions(q)] = True
            positive[i, self.seq.same_text_rows(np.array([q.target]))] = True
        logits = (query @ self.all_vectors.T / self.cfg.temperature).masked_fill(torch.from_numpy(excluded), float("-inf"))
        return multi_positive_nce(logits, torch.from_numpy(positive))  # (B, N) full softmax

    def _lexical(self, contexts: list[np.ndarray], lists: list[np.ndarray], train: bool) -> list[np.ndarray] | None:
        """Word-overlap features per query from the rows' texts; in training some queries' texts are hidden
        (all zero, as for a caller that gives raw vectors) so that the model also scores without them."""
        if self.words is None:
            return None
        cfg = self.model.cfg
        out = []
        for ctx, rows in zip(contexts, lists):
            if train and self.rng.random() < self.cfg.text_dropout:
                out.append(np.zeros((len(rows), cfg.n_word_features), np.float32))
            else:
                seam = self.seam_words[ctx[-1:]] if self.seam_words is not None else None
                out.append(lexical.features(self.words[ctx], self.words[rows], cfg.max_context, cfg.novel_words, seam))
        return out

    def mine(self, queries: list[Query], memory_vectors: np.ndarray | None = None) -> list[np.ndarray]:
        """Stage-1 candidate rows per query, exactly as inference generates them; ``memory_vectors``: the transition
        memory's predictions, whose nearest join them (pipeline.candidates)."""
        pipeline = RerankPipeline(self.model, self.store, self.cfg.n_candidates)
        exclude = [set(self.seq.ids[self._exclusions(q)].tolist()) for q in queries]
        texts = [[self.texts[r] for r in q.context] for q in queries] if self.texts is not None else None
        words = self._word_results(queries, texts, exclude) if self.model.cfg.uses_word_index and texts is not None else None
        ids, _ = pipeline.candidates([self.seq.vectors[q.context] for q in queries], exclude, context_texts=texts,
                                     words=words, memory_vectors=memory_vectors)
        return [np.asarray([self.seq.row_of_id[int(i)] for i in row], np.int64) for row in ids]

    def _word_results(self, queries: list[Query], texts: list[list[str]], exclude: list[set[int]]) -> list:
        """candidates.word_sources() per query; they do not change with the model, so each query's are searched
        once, in its first mining, and kept for the epochs after it."""
        key = [tuple(q.context.tolist()) for q in queries]
        todo = [i for i, k in enumerate(key) if k not in self._word_lists]
        found = word_sources(self.store, [texts[i] for i in todo], self.model.cfg.word_candidates,
                             [exclude[i] for i in todo], n_seam=self.model.cfg.seam_candidates) if todo else []
        self._word_lists.update({key[i]: [np.asarray(ids, np.int64) for ids in row] for i, row in zip(todo, found)})
        return [self._word_lists[k] for k in key]

    @torch.no_grad()
    def validation_loss(self) -> float:
        """The query head's full-softmax loss on the validation queries."""
        self.model.eval()
        qs = [q for q in self.val_q if self.seq.text_class[q.target] not in self.seq.text_class[q.context]]
        losses = []
        for s in range(0, len(qs), 256):
            x, m = context_batch(self.seq, [q.context for q in qs[s:s + 256]], self.model.cfg.max_context)
            losses.append(self._query_loss(self.model.encode(x, m)[0], qs[s:s + 256]).item() * len(qs[s:s + 256]))
        return sum(losses) / max(len(qs), 1)

    def validate(self, lists: list[np.ndarray] | None = None) -> dict:
        """Pipeline metrics on the validation queries; ``lists``: their stage-1 rows if already mined."""
        lists = self.mine(self.val_q) if lists is None else lists
        pipeline = RerankPipeline(self.model, self.store, self.cfg.n_candidates)
        scored = pipeline.rank([self.seq.vectors[q.context] for q in self.val_q], [self.seq.ids[l] for l in lists],
                               [self.seq.vectors[l] for l in lists],
                               lexical_features=self._lexical([q.context for q in self.val_q], lists, train=False))
        ranks = [hit_rank(self.seq.text_class[[self.seq.row_of_id[int(i)] for i in s.ids[:10]]], self.seq.text_class[q.target])
                 for s, q in zip(scored, self.val_q)]
        stage1 = np.mean([self.holds_target(l, q) for l, q in zip(lists, self.val_q)])
        return {**summarize(np.array(ranks), n_boot=200), "stage1_recall": float(stage1)}

    def tune_lexical_boost(self, lists: list[np.ndarray]) -> float:
        """Fit the one weight of the words' cosine to the last paragraph added to the trained scores, on the
        validation lists (``lists``: their stage-1 rows; a grid, ties to the smaller). Listwise training leaves
        that signal underused: on PEPs a boost of 4 raised validation and test MRR@10 alike
        (bench/results/lexical_probe_on_lexical_model.md)."""
        lex = self._lexical([q.context for q in self.val_q], lists, train=False)
        pipeline = RerankPipeline(self.model, self.store, self.cfg.n_candidates)
        scores, _, _ = pipeline.score([self.seq.vectors[q.context] for q in self.val_q], [self.seq.vectors[l] for l in lists],
                                      lexical_features=lex)
        last = self.model.cfg.max_context - 1
        best = self._fit_weight("lexical", lists, scores, [f[:, last] for f in lex], LEXICAL_BOOSTS)
        self.model.lexical_boost.fill_(float(self.model.lexical_boost) + best)
        return best

    def _fit_weight(self, name: str, lists: list[np.ndarray], scores: list[np.ndarray], feature: list[np.ndarray],
                    grid: tuple[float, ...], at_zero: tuple[list[np.ndarray], list[np.ndarray]] | None = None) -> float:
        """The weight of ``grid`` whose ``scores + weight * feature`` (per validation query, over its list ``lists``)
        gives the best validation MRR@10, ties to the smaller; logged with every weight's figure. ``at_zero``: the
        (lists, scores) that weight 0 ranks instead (what serves without the feature, when it also widens the lists)."""
        def mrr(weight: float) -> float:
            rows, base = at_zero if weight == 0 and at_zero is not None else (lists, scores)
            ranks = [hit_rank(self.seq.text_class[l[np.argsort(-(sc + weight * f if weight else sc), kind="stable")][:10]],
                              self.seq.text_class[q.target]) for l, sc, f, q in zip(rows, base, feature, self.val_q)]
            return float(per_query(np.array(ranks))["mrr@10"].mean())

        found = {w: mrr(w) for w in grid}
        best = max(grid, key=lambda w: (found[w], -w))
        log.info("%s boost: validation MRR@10 %s -> %g", name, {w: round(m, 4) for w, m in found.items()}, best)
        return best

    def tune_memory_boost(self, lists: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
        """Fit the weight of a candidate's cosine to the transition memory's predicted next vector (transitions.py),
        added to the trained scores, on the validation lists as tune_lexical_boost fits its own (a grid, ties to
        the smaller; 0 keeps the memory out). A weight above 0 ranks the lists as they are served with it: widened by
        the memory's candidates (candidates.py) and scored again. The memory holds the transitions of the training
        documents trained on. Returns the weight and the validation lists it serves."""
        self.model.cfg.memory_boost = 0.0  # the scores without it
        pipeline = RerankPipeline(self.model, self.store, self.cfg.n_candidates)
        contexts = [self.seq.vectors[q.context] for q in self.val_q]
        p = self.training_memory.predict(np.stack([c[-1] for c in contexts]))
        if p is None:
            log.info("memory boost: no training transitions to remember")
            return 0.0, lists

        def scored(rows: list[np.ndarray]) -> list[np.ndarray]:
            lex = self._lexical([q.context for q in self.val_q], rows, train=False)
            return pipeline.score(contexts, [self.seq.vectors[r] for r in rows], lexical_features=lex)[0]

        widened = self.mine(self.val_q, memory_vectors=p)
        best = self._fit_weight("memory", widened, scored(widened), [self.seq.vectors[r] @ q for r, q in zip(widened, p)],
                                MEMORY_BOOSTS, at_zero=(lists, scored(lists)))
        self.model.cfg.memory_boost = best
        return best, (widened if best else lists)

    # ---- phases ----------------------------------------------------------------------
    def _epoch(self, desc: str, batches, step) -> float:
        self.model.train()
        losses = []
        with progress_bar(total=len(batches), desc=desc, unit="batch", quiet=self.quiet) as bar:
            for batch in batches:
                loss = step(batch)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{desc}: loss became {loss.item()}; lower --lr")
                self.opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.opt.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        return float(np.mean(losses))

    def _batches(self, items: list) -> list[list]:
        order = self.rng.permutation(len(items))
        return [[items[i] for i in order[s:s + self.cfg.batch_size]] for s in range(0, len(items), self.cfg.batch_size)]

    def phase1_step(self, batch: list[Query]) -> torch.Tensor:
        x, m = context_batch(self.seq, self._contexts(batch, train=True), self.model.cfg.max_context)
        query, _ = self.model.encode(x, m)
        return self._query_loss(query, batch)

    def phase2_step(self, batch: list[tuple[Query, np.ndarray, np.ndarray | None]]) -> torch.Tensor:
        queries = [q for q, _, _ in batch]
        lists = [rows for _, rows, _ in batch]
        contexts = self._contexts(queries, train=False)
        x, m = context_batch(self.seq, contexts, self.model.cfg.max_context)
        c, cm = candidate_batch(self.seq, lists)
        lex = self._lexical(contexts, lists, train=True)
        out = self.model(x, m, c, cm, lexical_features=pad_candidates(lex)[0] if lex is not None else None)
        if self.cfg.train_memory_weight:  # the memory's term, as pipeline.score adds it when serving
            p = torch.from_numpy(np.stack([pq for _, _, pq in batch]))
            out["scores"] = out["scores"] + self.cfg.train_memory_weight * (c @ p[:, :, None]).squeeze(-1)
        positive = torch.zeros_like(cm)
        for i, (q, rows, _) in enumerate(batch):
            positive[i, :len(rows)] = torch.from_numpy(self.seq.text_class[rows] == self.seq.text_class[q.target])
        loss = multi_positive_nce(out["scores"], positive)
        if self.cfg.near_weight:
            loss = loss + self.cfg.near_weight * multi_positive_nce(out["scores"], self.near_positives(batch, positive))
        if self.cfg.phase2_query_weight:
            loss = loss + self.cfg.phase2_query_weight * self._query_loss(out["query"], queries)
        return loss

    def near_positives(self, batch: list[tuple[Query, np.ndarray, np.ndarray | None]],
                       positive: torch.Tensor) -> torch.Tensor:
        """(B,K) ``positive`` (the target and its copies) and every candidate whose text is one of the ``near_window``
        paragraphs after the target in its document (a store's rows are in document order)."""
        near = positive.clone()
        for i, (q, rows, _) in enumerate(batch):
            last = min(q.target + self.cfg.near_window, int(self.seq.doc_rows[self.seq.doc_ids[q.target]][-1]))
            after = np.arange(q.target + 1, last + 1)
            near[i, :len(rows)] |= torch.from_numpy(np.isin(self.seq.text_class[rows], self.seq.text_class[after]))
        return near

    @cached_property
    def training_memory(self) -> transitions.TransitionMemory:
        """The transition memory of the rows trained on (their training documents'), made once for phase 2's
        predictions and the memory weight's fit."""
        return transitions.TransitionMemory.of_documents(self.seq.doc_ids, self.seq.vectors)

    def training_memory_predictions(self) -> np.ndarray:
        """(training queries, D) the transition memory's prediction for each training query
        (TrainConfig.train_memory_weight), each from the transitions of the other training documents: its own
        document's would name its target."""
        codes = transitions.document_codes(self.seq.doc_ids)
        last = self.seq.vectors[[q.context[-1] for q in self.train_q]]
        p = self.training_memory.predict_leaving_out(last, np.array([codes[self.seq.doc_ids[q.target]]
                                                                       for q in self.train_q]))
        return p if p is not None else last

    def holds_target(self, rows: np.ndarray, q: Query) -> bool:
        """Whether the candidate ``rows`` hold ``q``'s target or a paragraph with its text."""
        return bool(np.isin(self.seq.text_class[rows], self.seq.text_class[q.target]).any())

    def stage1_hits(self) -> np.ndarray:
        """Per validation query, whether its stage-1 list (the current query head's) holds the target."""
        return np.array([self.holds_target(rows, q) for rows, q in zip(self.mine(self.val_q), self.val_q)])

    def _snapshot(self) -> dict:
        return {k: v.clone() for k, v in self.model.state_dict().items()}

    def phase1(self, history: list) -> dict | None:
        """The query head's epochs. From scratch (or ``finetune_head`` train) every one runs. Fine-tuning with
        ``finetune_head`` auto (TrainConfig.head_trial) runs them while the validation split's stage-1 recall rises,
        and keeps the best epoch's head only if it finds clearly more targets than the starting model's (clearly_more
        over the validation queries); else the starting weights come back, and the random generators' states with
        them, so that phase 2 runs as with finetune_phase1_epochs 0. Either way phase 2 starts with a fresh optimizer
        (the trial's moments belong to the epochs it may have undone). Measured (bench/quality/general_model.md, A trial
        of head epochs): the trained head found clearly more targets on every corpus, from starts that saw its genre or
        not, and validation MRR@10 did not follow, so fine-tuning runs no head epochs by default. Returns what the trial
        found, None without one."""
        epochs = self.cfg.head_epochs(fine_tuning=self.started_from_weights)
        trial = self.started_from_weights and self.cfg.head_trial(fine_tuning=True)
        if trial:
            start_state, start_rng = self._snapshot(), (self.rng.bit_generator.state, torch.get_rng_state())
            start = best = self.stage1_hits()
            best_state, best_epoch = None, 0
            log.info("phase 1: the starting query head finds %.3f of the validation targets", start.mean())
        for epoch in range(epochs):
            loss = self._epoch(f"phase 1 (query head) epoch {epoch + 1}/{epochs}", self._batches(self.train_q),
                               self.phase1_step)
            history.append({"phase": 1, "epoch": epoch + 1, "loss": loss})
            if not trial:
                log.info("phase 1 epoch %d: loss %.4f", epoch + 1, loss)
                continue
            hits = self.stage1_hits()
            history[-1]["stage1_recall"] = float(hits.mean())
            log.info("phase 1 epoch %d: loss %.4f, validation stage-1 recall %.3f", epoch + 1, loss, hits.mean())
            if hits.mean() <= best.mean():
                break
            best, best_state, best_epoch = hits, self._snapshot(), epoch + 1
        if not trial:
            return None
        kept, se = clearly_more(start, best)
        self.model.load_state_dict(best_state if kept else start_state)
        if not kept:
            self.rng.bit_generator.state = start_rng[0]
            torch.set_rng_state(start_rng[1])
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        run = sum(h["phase"] == 1 for h in history)
        found = (f"validation stage-1 recall {start.mean():.3f} -> {best.mean():.3f} at epoch {best_epoch}"
                 if best_epoch else f"no epoch raised validation stage-1 recall above {start.mean():.3f}")
        log.info("phase 1: %s (%s of %d run; twice the gain's standard error %.3f)",
                 f"the head of epoch {best_epoch} kept" if kept else "the starting query head kept", found, run, 2 * se)
        return {"start_stage1_recall": float(start.mean()), "best_stage1_recall": float(best.mean()),
                "best_epoch": best_epoch, "epochs_run": run,
                "gain_se": se if np.isfinite(se) else None, "kept": "trained" if kept else "start"}

    def phase2(self, history: list) -> tuple[dict, dict | None]:
        """The scorer's epochs, each on lists mined again with the current query head, early-stopped on validation
        MRR@10; with ``train_memory_weight``, beside the memory's term (the model's memory_boost set to it meanwhile,
        fit's doing). Returns (the best epoch's validation figures, its weights; None: no epoch ran)."""
        best, best_state, stale = {"mrr@10": -1.0}, None, 0
        p_train = self.training_memory_predictions() if self.cfg.train_memory_weight else None
        for epoch in range(self.cfg.phase2_epochs):
            lists = self.mine(self.train_q, p_train)  # re-mined with the current query head, as inference would
            usable = [(q, rows, None if p_train is None else p_train[i])
                      for i, (q, rows) in enumerate(zip(self.train_q, lists)) if self.holds_target(rows, q)]
            loss = self._epoch(f"phase 2 (scorer) epoch {epoch + 1}/{self.cfg.phase2_epochs}",
                               self._batches(usable), self.phase2_step)
            metrics = self.validate()
            history.append({"phase": 2, "epoch": epoch + 1, "loss": loss, "usable_queries": len(usable), **metrics})
            log.info("phase 2 epoch %d: loss %.4f, %d usable lists, validation MRR@10 %.4f R@1 %.4f stage-1 %.3f",
                     epoch + 1, loss, len(usable), metrics["mrr@10"], metrics["recall@1"], metrics["stage1_recall"])
            if metrics["mrr@10"] > best["mrr@10"]:
                best, stale = metrics, 0
                best_state = {k: v.clone() for k, v in self.model.state_dict().items()}
            else:
                stale += 1
                if stale >= self.cfg.patience:
                    log.info("early stop: no better validation MRR@10 for %d epochs", stale)
                    break
        return best, best_state

    def fit(self) -> dict:
        started = time.perf_counter()
        history = []
        head = self.phase1(history)
        for group in self.opt.param_groups:
            group["lr"] = self.cfg.phase2_lr or self.cfg.lr
        self.model.cfg.memory_boost = self.cfg.train_memory_weight  # validation lists and scores as they would serve
        try:
            best, best_state = self.phase2(history)
        finally:
            self.model.cfg.memory_boost = 0.0  # fitted below
        if best_state is not None:
            self.model.load_state_dict(best_state)
        boost = memory_boost = None
        if best_state is not None:
            lists = self.mine(self.val_q)  # the boosts do not change the query head: one mining for all
            boost = self.tune_lexical_boost(lists) if self.words is not None else None
            memory_boost, lists = self.tune_memory_boost(lists)
            best = self.validate(lists)
            log.info("with the boosts: validation MRR@10 %.4f R@1 %.4f", best["mrr@10"], best["recall@1"])
        return {"validation": best, "history": history, "head_trial": head, "lexical_boost": boost,
                "memory_boost": memory_boost, "train_queries": len(self.train_q),
                "val_queries": len(self.val_q), "seconds": round(time.perf_counter() - started, 1),
                "train_config": asdict(self.cfg)}
