"""The attention model against a reference implementation, its checkpoints, and its config errors."""

import math
import pickle

import pytest
import torch
from nextpara.attention_core.checkpoint import load_checkpoint, save_checkpoint
from nextpara.attention_core.model import POOL_TOP, MultiHeadAttention, NextParagraphModel, list_z
from nextpara.attention_core.model_config import LATER_FIELDS, SCORERS, RerankerConfig, scorer_name
from nextpara.errors import FailedPreconditionError, StoreMismatchError


def explicit_multi_head(mha: MultiHeadAttention, x_q, x_kv, mask):
    """softmax(Q K^T / sqrt(d_k)) V per head, heads concatenated and projected: written out from the weights."""
    d = x_q.shape[-1]
    hs = d // mha.n_heads
    heads = []
    for h in range(mha.n_heads):
        sl = slice(h * hs, (h + 1) * hs)
        Q = x_q @ mha.w_q.weight[sl].T + mha.w_q.bias[sl]
        K = x_kv @ mha.w_k.weight[sl].T + mha.w_k.bias[sl]
        V = x_kv @ mha.w_v.weight[sl].T + mha.w_v.bias[sl]
        scores = Q @ K.transpose(-2, -1) / math.sqrt(hs)
        scores = scores.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ V)
    return torch.cat(heads, dim=-1) @ mha.w_o.weight.T + mha.w_o.bias


def test_fused_attention_equals_the_formula():
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 4, dropout=0.0).eval()
    x_q, x_kv = torch.randn(3, 7, 64), torch.randn(3, 5, 64)
    mask = torch.rand(3, 7, 5) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    expected = explicit_multi_head(mha, x_q, x_kv, mask)
    fused, none = mha(x_q, x_kv, mask)
    explicit, weights = mha(x_q, x_kv, mask, need_weights=True)
    assert none is None and weights.shape == (3, 4, 7, 5)
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 7))
    assert (weights[~mask[:, None].expand_as(weights)] == 0).all()


@pytest.mark.parametrize("K", [1, 2, POOL_TOP + 1, 150])
def test_pool_density_is_the_mean_cosine_to_the_nearest_others(K):
    """The density against a loop over each candidate's sorted cosines to the other real candidates (padding left
    out), by both of pool()'s selections: NumPy's (its inputs need no gradient: store vectors, in training too) and
    torch's top-k (inputs that do)."""
    torch.manual_seed(K)
    cands = torch.nn.functional.normalize(torch.randn(2, K, 16), dim=-1)
    mask = torch.ones(2, K, dtype=torch.bool)
    mask[1, K // 2 + 1:] = False  # the second list is shorter, padded
    expected = torch.zeros(2, K, 1)
    for b in range(2):
        real = mask[b].nonzero().flatten().tolist()
        for i in real:
            others = sorted((float(cands[b, i] @ cands[b, j]) for j in real if j != i), reverse=True)[:POOL_TOP]
            expected[b, i, 0] = sum(others) / max(1, len(others))
    with torch.inference_mode():
        (fast,) = NextParagraphModel.pool(cands, mask)
    (graded,) = NextParagraphModel.pool(cands.requires_grad_(), mask)
    real = mask[..., None]
    torch.testing.assert_close(fast[real], expected[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(graded.detach()[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("changes", [{}, {"n_list_layers": 1}, {"pool_neighbours": True}, {"bilinear_last": True},
                                     {"list_norm": True}],
                         ids=["full", "list_layer", "pool_neighbours", "bilinear_last", "list_norm"])
def test_scores_do_not_depend_on_what_else_is_batched(changes):
    """A short candidate list padded to a longer one's length scores exactly as alone (the pool-density
    feature once counted padding, so engines batching rows differently disagreed)."""
    torch.manual_seed(1)
    model = NextParagraphModel(RerankerConfig(embed_dim=48, d_model=32, n_heads=2, **changes)).eval()
    for p in model.score_mlp[-1].parameters():  # a trained scorer is not zero: let the features matter
        torch.nn.init.normal_(p)
    if changes.get("bilinear_last"):
        torch.nn.init.normal_(model.bilinear)
    unit = lambda *shape: torch.nn.functional.normalize(torch.randn(*shape), dim=-1)  # noqa: E731
    ctx, short = unit(1, 8, 48), unit(1, 5, 48)
    alone = model(ctx, torch.ones(1, 8, dtype=torch.bool), short, torch.ones(1, 5, dtype=torch.bool))["scores"]
    padded = torch.cat([short, unit(1, 25, 48)], dim=1)
    mask = torch.zeros(1, 30, dtype=torch.bool)
    mask[0, :5] = True
    batched = model(ctx.expand(2, 8, 48), torch.ones(2, 8, dtype=torch.bool), torch.cat([padded, unit(1, 30, 48)]),
                    torch.cat([mask, torch.ones(1, 30, dtype=torch.bool)]))["scores"]
    torch.testing.assert_close(batched[0, :5], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dim", [384, 1536])
def test_any_embedding_dimension(dim):
    model = NextParagraphModel(RerankerConfig(embed_dim=dim, d_model=64, n_heads=4)).eval()
    ctx = torch.nn.functional.normalize(torch.randn(2, 8, dim), dim=-1)
    cand = torch.nn.functional.normalize(torch.randn(2, 30, dim), dim=-1)
    ctx_mask = torch.ones(2, 8, dtype=torch.bool)
    ctx_mask[1, :6] = False  # a context of two paragraphs
    cand_mask = torch.ones(2, 30, dtype=torch.bool)
    cand_mask[0, 25:] = False
    out = model(ctx, ctx_mask, cand, cand_mask, need_weights=True)
    assert out["query"].shape == (2, dim) and out["scores"].shape == (2, 30)
    torch.testing.assert_close(out["query"].norm(dim=-1), torch.ones(2))
    assert torch.isinf(out["scores"][0, 25:]).all() and torch.isfinite(out["scores"][1]).all()
    assert out["attention"].shape == (2, 4, 30, 8)
    assert (out["attention"][1, :, :, :6] == 0).all()  # padding gets no attention
    # an untrained model's query is the residual it starts from: last + 0.5 * mean of the context
    last, mean = ctx[1, -1], ctx[1, 6:].mean(0)
    torch.testing.assert_close(out["query"][1], torch.nn.functional.normalize(last + 0.5 * mean, dim=0))


@pytest.mark.parametrize("list_norm", [False, True])
def test_the_fast_scorer_reads_only_the_features(list_norm):
    """The fast scorer: no candidate token, no cross-attention (so no weights to show); two candidates with the same
    similarity and word features (the pool density too: each is the other's only neighbour) score the same, while
    the full scorer, which reads each candidate's own vector, tells them apart. A third candidate, the first's part
    in the context's span, is as close to both (so the pair stays alike, pool density too) and gives each feature a
    spread in the list: with list_norm the pair's z-scores then differ by their features' rounding over that spread,
    not over 1e-4."""
    torch.manual_seed(2)
    fast = NextParagraphModel(RerankerConfig(embed_dim=48, d_model=32, n_heads=2, list_norm=list_norm,
                                             **SCORERS["fast"])).eval()
    full = NextParagraphModel(RerankerConfig(embed_dim=48, d_model=32, n_heads=2, list_norm=list_norm)).eval()
    for model in (fast, full):
        for p in model.score_mlp[-1].parameters():
            torch.nn.init.normal_(p)
    assert sum(p.numel() for p in fast.parameters()) < sum(p.numel() for p in full.parameters())
    ctx = torch.nn.functional.normalize(torch.randn(1, 4, 48), dim=-1)
    # a candidate and its mirror through the context's span: the same cosines to the context and to the query (an
    # untrained query head's output is zero, so the query lies in that span), another vector
    a = torch.nn.functional.normalize(torch.randn(48), dim=0)
    basis, _ = torch.linalg.qr(ctx[0].T)  # (48, 4): the context's span
    inside = basis @ (basis.T @ a)
    cand = torch.stack([a, 2 * inside - a, inside / inside.norm()])[None]  # (1, 3, 48)
    masks = torch.ones(1, 4, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)
    out = fast(ctx, masks[0], cand, masks[1], need_weights=True)
    assert out["attention"] is None
    torch.testing.assert_close(out["scores"][0, 0], out["scores"][0, 1])
    scores = full(ctx, masks[0], cand, masks[1])["scores"]
    assert (scores[0, 0] - scores[0, 1]).abs() > 1e-4
    with pytest.raises(ValueError, match=r"candidate_tokens=False needs n_scorer_layers=0 and n_list_layers=0, not 1 and 0"):
        RerankerConfig(candidate_tokens=False)


def test_list_z_scores_each_feature_among_the_lists_real_candidates():
    feats = torch.tensor([[[1.0, 5.0], [3.0, 5.0], [2.0, 5.0], [100.0, -7.0]]])  # (1, 4, 2); the last is padding
    mask = torch.tensor([[True, True, True, False]])
    z = list_z(feats, mask)
    sd = math.sqrt(2 / 3)  # of 1, 3, 2 (population)
    torch.testing.assert_close(z[0, :3, 0], torch.tensor([-1.0, 1.0, 0.0]) / (sd + 1e-4))
    assert z[0, :3, 1].abs().max() == 0 and z[0, 3].abs().max() == 0  # a column all alike and the padding: 0
    model = NextParagraphModel(RerankerConfig(embed_dim=48, d_model=32, n_heads=2, list_norm=True))
    assert model.cfg.n_features == 2 * model.cfg.n_raw_features == model.feat_proj.in_features


def test_pool_neighbour_features_by_hand():
    """pool_neighbours: each candidate's largest cosine to another candidate of its list, the cosine to the last
    context paragraph minus that, and log(1 + the candidates closer to it than the last context paragraph), written
    out with plain loops over a list padded to a longer one's length (padding never counts)."""
    torch.manual_seed(3)
    model = NextParagraphModel(RerankerConfig(embed_dim=16, d_model=16, n_heads=2, pool_neighbours=True)).eval()
    ctx = torch.nn.functional.normalize(torch.randn(1, 3, 16), dim=-1)
    cand = torch.nn.functional.normalize(torch.randn(1, 7, 16), dim=-1)
    mask = torch.tensor([[True] * 5 + [False] * 2])
    feats = model.features(ctx, torch.ones(1, 3, dtype=torch.bool), cand, mask, ctx[:, -1])
    assert feats.shape == (1, 7, model.cfg.n_raw_features - model.cfg.n_word_features)
    got = feats[0, :5, -3:]
    for i in range(5):
        to_last = float(cand[0, i] @ ctx[0, -1])
        others = [float(cand[0, i] @ cand[0, j]) for j in range(5) if j != i]
        closer = sum(c > to_last for c in others)
        torch.testing.assert_close(got[i], torch.tensor([max(others), to_last - max(others), math.log1p(closer)]))
    with pytest.raises(ValueError, match="pool_neighbours are read from the pool's cosines: they need pool_density"):
        RerankerConfig(pool_neighbours=True, pool_density=False)


def test_a_config_names_its_scorer():
    """What `nextpara info` and GetInfo say serves: a checkpoint's config names its scorer (a field it lacks has its
    default, as when it loads)."""
    assert scorer_name({}) == scorer_name({"d_model": 64}) == "full"
    assert scorer_name(SCORERS["fast"]) == scorer_name({**SCORERS["fast"], "pool_density": True}) == "fast"
    assert scorer_name({"pool_density": False}) == scorer_name({"n_list_layers": 1}) == "custom"


def test_config_errors_name_the_values():
    with pytest.raises(ValueError, match=r"d_model \(100\) must be divisible by n_heads \(3\)"):
        RerankerConfig(d_model=100, n_heads=3)
    model = NextParagraphModel(RerankerConfig(embed_dim=16, d_model=32, max_context=4))
    with pytest.raises(ValueError, match=r"context length 6 exceeds max_context \(4\)"):
        model.encode(torch.randn(1, 6, 16), torch.ones(1, 6, dtype=torch.bool))


@pytest.mark.parametrize("changes", [{}, SCORERS["fast"], {"pool_density": False}, {"pool_neighbours": True},
                                     {"bilinear_last": True}, {"list_norm": True}],
                         ids=["full", "fast", "no_density", "pool_neighbours", "bilinear_last", "list_norm"])
def test_checkpoint_round_trip_gives_identical_scores(tmp_path, changes):
    """Every scorer configuration loads as saved. A setting added since the first checkpoints is written only when it
    differs from what came before it, so a default model's checkpoint holds none of them (older nextpara versions
    load it), and a checkpoint that lacks them loads as before."""
    torch.manual_seed(1)
    model = NextParagraphModel(RerankerConfig(embed_dim=48, d_model=32, n_heads=2, **changes)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    meta = save_checkpoint(tmp_path / "model.safetensors", model,
                           {"embedder": {"name": "e", "dim": 48}, "corpus_fingerprint": "abc"})
    assert set(meta["model_config"]) & set(LATER_FIELDS) == set(changes) & set(LATER_FIELDS)
    loaded, meta2 = load_checkpoint(tmp_path / "model.safetensors", "e", 48)
    assert loaded.cfg == model.cfg
    assert meta2["model_version"] == meta["model_version"] and meta2["model_config"]["d_model"] == 32
    assert meta2["corpus_fingerprint"] == "abc" and meta2["code_version"]
    ctx, cand = torch.randn(2, 8, 48), torch.randn(2, 10, 48)
    m1, m2 = torch.ones(2, 8, dtype=torch.bool), torch.ones(2, 10, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(model(ctx, m1, cand, m2)["scores"], loaded(ctx, m1, cand, m2)["scores"], rtol=0, atol=0)
    with pytest.raises(StoreMismatchError, match="trained on embedder 'e', the store uses 'other'"):
        load_checkpoint(tmp_path / "model.safetensors", "other", 48)


def test_a_checkpoint_from_a_newer_version_is_refused_by_name(tmp_path):
    """A model setting this version does not know (a newer nextpara saved it) is a clear refusal, not a TypeError."""
    import json

    from nextpara.attention_core.served import META_KEY, read_checkpoint_meta
    from safetensors.torch import load_file, save_file

    model = NextParagraphModel(RerankerConfig(embed_dim=16, d_model=16, n_heads=2))
    save_checkpoint(tmp_path / "model.safetensors", model, {"embedder": {"name": "e", "dim": 16}})
    meta = read_checkpoint_meta(tmp_path / "model.safetensors")
    meta["model_config"]["seam_reader"] = True
    save_file(load_file(str(tmp_path / "model.safetensors")), str(tmp_path / "model.safetensors"),
              metadata={META_KEY: json.dumps(meta)})
    with pytest.raises(FailedPreconditionError, match=r"saved by a newer nextpara .*settings this version lacks: seam_reader"):
        load_checkpoint(tmp_path / "model.safetensors", "e", 16)


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.safetensors"
    path.write_bytes(pickle.dumps({"model": _Exploit(str(marker))}))
    with pytest.raises(FailedPreconditionError, match="not a nextpara safetensors checkpoint"):
        load_checkpoint(path)
    torch.save({"model": _Exploit(str(marker))}, path)  # the zip-pickle format torch.save writes
    with pytest.raises(FailedPreconditionError, match="pickled checkpoints are refused"):
        load_checkpoint(path)
    assert not marker.exists()


def test_a_checkpoint_that_fills_the_disk_is_a_storage_error_and_leaves_no_part_file(tmp_path):
    """A real write failure: the process may write files of at most 4 KB (RLIMIT_FSIZE), so the checkpoint's write
    fails with EFBIG, as a full disk's does with ENOSPC; the old checkpoint stays, and no part-written file is left
    (safetensors removes its own; the report's, written by replace_file_atomically, is removed by it)."""
    import subprocess
    import sys

    model = NextParagraphModel(RerankerConfig(embed_dim=16, d_model=16, n_heads=2, lexical=False))
    save_checkpoint(tmp_path / "model.safetensors", model, {"embedder": {"name": "old", "dim": 16}})
    before = (tmp_path / "model.safetensors").read_bytes()
    script = f"""
import resource, signal
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
from nextpara.attention_core.checkpoint import save_checkpoint, writing_in
from nextpara.attention_core.model import NextParagraphModel
from nextpara.attention_core.model_config import RerankerConfig
from nextpara.errors import StorageFullError
data_dir = Path({str(tmp_path)!r})
try:
    with writing_in(data_dir, "the new model", "the old model still serves"):
        save_checkpoint(data_dir / "model.safetensors", NextParagraphModel(RerankerConfig(embed_dim=16)), {{}})
except StorageFullError as e:
    print("storage full:", e)
from nextpara.attention_core.guard import Verdict, write_report
try:
    write_report(data_dir, Verdict(False, "a line", {{}}), "", {{"padding": "x" * 8192}})
except OSError as e:
    print("report:", e.errno)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"storage full: no space left on the file system of {tmp_path} while writing the new "
                               "model"), r.stdout
    assert "the old model still serves. Free space and retry" in r.stdout and "report: 27" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]  # no model.safetensors.tmp left
    assert (tmp_path / "model.safetensors").read_bytes() == before
