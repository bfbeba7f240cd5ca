"""Training settings: a plain dataclass, importable without torch or numpy (the CLI builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass

FINETUNE_HEAD = ("auto", "train")  # TrainConfig.finetune_head


@dataclass
class TrainConfig:
    max_context: int = 8  # L: context paragraphs per training query
    n_candidates: int = 100  # per stage-1 source (query head, last paragraph)
    phase1_epochs: int = 6  # query head, full softmax (8 was better on validation but slower; bench/results/experiments.json)
    finetune_phase1_epochs: int = 0  # query-head epochs when starting from a general model (init_shrink 1): 0 keeps its
    #                                  head as it is (phase 2's query loss still trains it, phase2_query_weight)
    finetune_head: str = "auto"  # with finetune_phase1_epochs above 0: auto runs the epochs one at a time, each followed
    #                              by the validation split's stage-1 recall, while it rises, and keeps the trained head
    #                              only if it finds clearly more targets than the starting head (by more than twice the
    #                              standard error of the paired gain), else restores the starting model's weights; train
    #                              runs and keeps every epoch. Phase 2 then starts with a fresh optimizer under auto, with
    #                              phase 1's under train. Measured (bench/quality/general_model.md, A trial of head
    #                              epochs): the trial kept the epochs on all three corpora, found more targets and moved
    #                              no MRR@10, so the default runs none
    phase2_epochs: int = 4  # scorer on mined lists (early stopping may end sooner)
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01
    temperature: float = 0.05  # of the full-softmax query loss
    truncate_prob: float = 0.3  # chance a training context is cut to a random shorter length
    text_dropout: float = 0.1  # chance a phase-2 query's texts are hidden (the model learns to score raw vectors too)
    max_train_queries: int = 0  # a seeded sample of the training split's queries; 0: every one
    val_queries: int = 1000  # validation noise matters: early stopping picks the epoch
    patience: int = 2  # epochs without a better validation MRR@10 before stopping
    phase2_lr: float = 0.0  # learning rate of phase 2 (0: the same as lr)
    phase2_query_weight: float = 0.5  # weight of the phase-1 loss kept in phase 2 (keeps the query head)
    near_weight: float = 0.0  # weight of a second listwise loss whose positives are the target and the near_window
    #                           paragraphs after it (a locality signal: near the context beats far in its document)
    near_window: int = 3  # paragraphs after the target that count as near for near_weight
    init_shrink: float = 1.0  # fine-tuning starts from init_shrink x the starting model's weights + the rest x a fresh
    #                           initialisation ("shrink and perturb": a warm start can generalise worse than a fresh one);
    #                           below 1, phase 1 runs phase1_epochs, as from scratch
    train_memory_weight: float = 0.0  # phase 2 scores the lists with the transition memory's term at this weight, as
    #                                   they serve with it, the lists widened by its candidates (each training query's
    #                                   prediction without its own document's transitions); 0: the memory's weight is
    #                                   fitted after training only (the weight that serves is fitted after training
    #                                   either way: RerankerConfig.memory_boost)
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("batch_size", 1), ("n_candidates", 1), ("val_queries", 1), ("phase2_epochs", 1),
                          ("max_train_queries", 0), ("patience", 0)):
            if getattr(self, name) < low:  # batch 0: range() raised; phase 2 gives the figures the guard and report read
                raise ValueError(f"{name} must be at least {low}, got {getattr(self, name)}")
        for name, low, high, open_low in (("lr", 0, 10, True), ("phase2_lr", 0, 10, False), ("weight_decay", 0, 10, False),
                                          ("temperature", 0, 100, True), ("truncate_prob", 0, 1, False),
                                          ("text_dropout", 0, 1, False), ("phase2_query_weight", 0, 100, False)):
            value = getattr(self, name)
            if not (low < value <= high if open_low else low <= value <= high):  # NaN fails both
                raise ValueError(f"{name} must be {'above' if open_low else 'at least'} {low} and at most {high}, "
                                 f"got {value}")
        if not 0.0 <= self.train_memory_weight <= 100.0:  # NaN fails too
            raise ValueError(f"train_memory_weight must be at least 0 and at most 100, got {self.train_memory_weight}")
        if self.near_weight < 0 or self.near_window < 1:
            raise ValueError(f"near_weight ({self.near_weight}) must be 0 or more and near_window ({self.near_window}) "
                             "1 or more")
        if min(self.phase1_epochs, self.finetune_phase1_epochs, self.phase2_epochs) < 0:
            raise ValueError(f"epochs must be 0 or more (phase1_epochs {self.phase1_epochs}, finetune_phase1_epochs "
                             f"{self.finetune_phase1_epochs}, phase2_epochs {self.phase2_epochs})")
        if self.finetune_head not in FINETUNE_HEAD:
            raise ValueError(f"finetune_head {self.finetune_head!r} must be one of {', '.join(FINETUNE_HEAD)}")
        if not 0.0 <= self.init_shrink <= 1.0:
            raise ValueError(f"init_shrink ({self.init_shrink}) must be between 0 and 1")

    def head_epochs(self, fine_tuning: bool) -> int:
        """Phase 1's epochs (at most, with finetune_head auto): a head started whole from a model's weights gets
        finetune_phase1_epochs; a fresh head, or one init_shrink made partly fresh, is trained for phase1_epochs."""
        return self.finetune_phase1_epochs if fine_tuning and self.init_shrink == 1.0 else self.phase1_epochs

    def head_trial(self, fine_tuning: bool) -> bool:
        """Whether phase 1 is a trial whose head is kept only if it pays (finetune_head auto, Trainer.phase1)."""
        return fine_tuning and self.init_shrink == 1.0 and self.finetune_head == "auto" and self.head_epochs(True) > 0


# what each setting's flag does, for `nextpara train --help` (the comments above say why); every default is appended
HELP = {
    "max_context": "context paragraphs per training query, L",
    "n_candidates": "stage-1 candidates per source (query head, last paragraph)",
    "phase1_epochs": "query-head epochs when the head starts fresh (from scratch, or --init-shrink below 1)",
    "finetune_phase1_epochs": "query-head epochs when fine-tuning (0: the starting model's head is kept)",
    "finetune_head": "with --finetune-phase1-epochs: auto keeps the trained head only if it finds clearly more "
                     "validation targets; train keeps every epoch",
    "phase2_epochs": "scorer epochs at most (early stopping may end sooner)",
    "batch_size": "queries per batch",
    "lr": "learning rate",
    "weight_decay": "AdamW weight decay",
    "temperature": "temperature of the query head's softmax loss",
    "truncate_prob": "chance a training context is cut to a random shorter length",
    "text_dropout": "chance a phase-2 query's texts are hidden, so the model also learns to score raw vectors",
    "max_train_queries": "a seeded sample of this many training queries; 0: every one",
    "val_queries": "validation queries for early stopping",
    "patience": "epochs without a better validation MRR@10 before stopping",
    "phase2_lr": "learning rate of phase 2; 0: the same as --lr",
    "phase2_query_weight": "weight of the query head's loss kept in phase 2",
    "near_weight": "weight of a loss whose positives are the target and the --near-window paragraphs after it; 0: off",
    "near_window": "paragraphs after the target that count as near for --near-weight",
    "init_shrink": "start from this times the starting model's weights plus the rest of a fresh initialisation; "
                   "1: off",
    "train_memory_weight": "train the scorer beside the transition memory's term at this weight, on lists widened by its "
                     "candidates; 0: the memory's weight is fitted after training only",
    "seed": "random seed",
}
