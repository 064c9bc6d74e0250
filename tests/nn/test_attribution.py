"""Direct attribution (nn/attribution.py): the parts sum to the last hidden state on every family; a linear metric's
attributions plus its constant are the metric; the heads and bias of a layer are residual_decomposition's attention
part; a nonlinear metric's attributions are its first-order changes along each part."""

from __future__ import annotations

import pytest
import torch

import minialign as ma
from family_builders import FAMILIES, random_encoder, supported
from minialign.nn import analysis
from minialign.nn.attribution import direct_attribution

# the families of the shared table, and those tested in files of their own (a sandwich norm: Gemma 3; causal: Qwen)
ARCHS = [name for name in FAMILIES if supported(name)] + ["gemma3_text", "qwen3", "qwen2"]
WIDTH = 32  # random_encoder's hidden size


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 250, (2, 7), generator=g)
    return {"input_ids": ids, "attention_mask": torch.tensor([[1] * 7, [1] * 4 + [0] * 3])}


def _vector(seed: int) -> torch.Tensor:
    return torch.randn(WIDTH, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_parts_sum_to_the_state_and_a_linear_metric_to_itself(arch):
    """Every family, pre- and post-LN: the parts sum to last_hidden_state (padding included); a linear per-text
    metric <w, h_0> + 0.5 is its attributions plus a rest equal to its constant, to float rounding."""
    model = random_encoder(arch)
    inputs = _inputs()
    w = _vector(1)
    result = direct_attribution(model, inputs, lambda h: h[:, 0] @ w + 0.5)
    with torch.no_grad():
        state = model(**inputs).last_hidden_state
    torch.testing.assert_close(sum(result.parts.values()), state, atol=1e-5, rtol=0)
    torch.testing.assert_close(result.metric, state[:, 0] @ w + 0.5, atol=1e-5, rtol=1e-5)
    assert all(a.shape == (2,) for a in result.attributions.values())
    torch.testing.assert_close(sum(result.attributions.values()) + result.rest, result.metric, atol=1e-6, rtol=0)
    torch.testing.assert_close(result.rest, torch.full((2,), 0.5), atol=1e-5, rtol=0)
    heads = {f"layers.{i}.attention.head.{h}" for i in range(3) for h in range(4)}
    assert heads <= result.attributions.keys()
    assert {"embeddings", "layers.0.ffn", "layers.2.ffn"} <= result.attributions.keys()
    assert result.by_head().shape == (2, 3, 4) and result.by_layer().shape == (2, 3, 2)


@pytest.mark.parametrize("arch", ["bert", "modernbert", "eurobert"])
def test_heads_and_bias_are_the_decompositions_attention_part(arch):
    """Against analysis.residual_decomposition of the same forward: each of its parts' <g, part> is the sum of the
    attributions it splits (a layer's heads and output bias: its attention; the rest one to one), so by_layer's
    attention column is the layer's whole attention."""
    model = random_encoder(arch)
    inputs = _inputs()
    w = _vector(2)
    result = direct_attribution(model, inputs, lambda h: h[:, 0] @ w)
    with torch.no_grad(), ma.capture(model) as cap:
        model(**inputs)
    g = torch.zeros(2, 7, WIDTH)
    g[:, 0] = w
    whole = {name: (g * part).sum(dim=(1, 2)) for name, part in analysis.residual_decomposition(model, cap).items()}
    mine = result.attributions
    for name, expected in whole.items():
        split = [a for n, a in mine.items() if n == name or n.startswith(f"{name}.")]
        torch.testing.assert_close(sum(split), expected, atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(result.by_layer()[:, :, 0],
                               torch.stack([whole[f"layers.{i}.attention"] for i in range(3)], dim=1),
                               atol=1e-5, rtol=1e-5)
    biases = torch.stack([mine.get(f"layers.{i}.attention.bias", torch.zeros(2)) for i in range(3)], dim=1)
    torch.testing.assert_close(result.by_head().sum(-1) + biases, result.by_layer()[:, :, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(result.by_layer()[:, :, 1],
                               torch.stack([whole[f"layers.{i}.ffn"] for i in range(3)], dim=1))


def test_a_head_models_scalar_logit_difference():
    """A ClassifierModel: the metric reads its encoder's last hidden state; a scalar logit difference of a linear
    probe on the first token, summed over the batch, sums to itself with the probe's constant as the rest; top(k)
    ranks by |attribution|."""
    config = ma.Config(vocab_size=300, hidden_size=WIDTH, num_layers=2, num_heads=4, intermediate_size=40,
                       hidden_dropout=0.0, attention_dropout=0.0)
    model = ma.ClassifierModel(config, seed=0).eval()
    probe = torch.nn.Linear(WIDTH, 2).requires_grad_(False)
    torch.nn.init.normal_(probe.bias)

    def difference(h):
        logits = probe(h[:, 0])  # (B, 2)
        return (logits[:, 0] - logits[:, 1]).sum()

    inputs = _inputs()
    result = direct_attribution(model, inputs, difference)
    with torch.no_grad():
        state = model.encoder(**inputs).last_hidden_state
    assert result.metric.shape == () and all(a.shape == () for a in result.attributions.values())
    torch.testing.assert_close(result.metric, difference(state))
    torch.testing.assert_close(result.rest, 2 * (probe.bias[0] - probe.bias[1]), atol=1e-5, rtol=0)
    torch.testing.assert_close(result.by_layer().sum() + result.attributions["embeddings"]
                               + result.attributions["norm biases"] + result.rest, result.metric, atol=1e-5, rtol=0)
    top = result.top(4)
    assert [abs(v) for _, v in top] == sorted((abs(float(a)) for a in result.attributions.values()), reverse=True)[:4]


def test_a_cosine_is_linearised_at_the_forwards_own_state():
    """A nonlinear metric on a pre-LN model (ModernBERT): the cosine of the mean-pooled state to a reference. The
    attributions and rest sum to it; each attribution is the cosine's first-order change along its part (a central
    difference in float64), and the rest is small next to the metric only in that sense: checked, not assumed."""
    model = random_encoder("modernbert")
    inputs = _inputs()
    mask = inputs["attention_mask"][..., None].float()
    reference = _vector(3)

    def cosine(h):
        pooled = (h * mask).sum(1) / mask.sum(1)  # (B, C)
        return torch.nn.functional.cosine_similarity(pooled, reference.to(h.dtype)[None], dim=-1)  # (B,)

    result = direct_attribution(model, inputs, cosine)
    torch.testing.assert_close(sum(result.attributions.values()) + result.rest, result.metric, atol=1e-6, rtol=0)
    h = sum(result.parts.values()).double()
    eps = 1e-4
    for name in ("embeddings", "layers.1.attention.head.2", "layers.2.ffn", "norm biases"):
        part = result.parts[name].double()
        change = (cosine(h + eps * part) - cosine(h - eps * part)) / (2 * eps)
        torch.testing.assert_close(result.attributions[name].double(), change, atol=1e-5, rtol=1e-4, msg=name)


def test_pruned_heads_write_nothing():
    """A pruned head has no part and attributes 0 (by_head keeps the unpruned numbering); the parts still sum."""
    model = random_encoder("bert")
    model.layers[0].attention.prune([1])
    inputs = _inputs()
    result = direct_attribution(model, inputs, lambda h: h[:, 0] @ _vector(4))
    assert "layers.0.attention.head.1" not in result.parts and "layers.0.attention.head.3" in result.parts
    assert (result.by_head()[:, 0, 1] == 0).all() and (result.by_head()[:, 0, 3] != 0).all()
    with torch.no_grad():
        state = model(**inputs).last_hidden_state
    torch.testing.assert_close(sum(result.parts.values()), state, atol=1e-5, rtol=0)


def test_refusals_and_edge_metrics():
    """Training mode, DeBERTa-v2's convolution and a metric of the wrong shape are errors that say why; a metric that
    does not read the state is all rest; top(k) of a per-text metric asks which text."""
    model = random_encoder("bert")
    inputs = _inputs()
    with pytest.raises(ValueError, match="eval-mode"):
        direct_attribution(model.train(), inputs, lambda h: h.sum())
    model.eval()
    with pytest.raises(ValueError, match=r"0-d tensor or one value per text \(2,\).*\(2, 7\)"):
        direct_attribution(model, inputs, lambda h: h.sum(-1))
    constant = direct_attribution(model, inputs, lambda h: torch.tensor(3.0))
    assert constant.rest == 3.0 and all(a == 0 for a in constant.attributions.values())
    per_text = direct_attribution(model, inputs, lambda h: h[:, 0, 0])
    with pytest.raises(ValueError, match="text="):
        per_text.top(3)
    assert len(per_text.top(3, text=1)) == 3
    config = ma.Config(arch="deberta-v2", vocab_size=100, hidden_size=WIDTH, num_layers=2, num_heads=4,
                       intermediate_size=40, relative_attention=True, pos_att_type=("p2c", "c2p"), conv_kernel_size=3)
    conv = ma.Encoder(config, seed=0).eval()
    with pytest.raises(ValueError, match="convolution"):
        direct_attribution(conv, {"input_ids": torch.randint(5, 100, (1, 7))}, lambda h: h.sum())


def test_real_minilm(minilm_dir):
    """all-MiniLM-L6-v2's real weights (6 post-LN layers, 12 heads): the parts sum to the state and a linear metric's
    rest is its constant."""
    model = ma.Encoder.from_pretrained(minilm_dir).eval()
    batch = ma.Tokenizer.from_pretrained(minilm_dir)(["The tower was built in Paris.", "Short."])
    w = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(5))
    result = direct_attribution(model, dict(batch), lambda h: h[:, 0] @ w - 1.0)
    with torch.no_grad():
        state = model(**batch).last_hidden_state
    torch.testing.assert_close(sum(result.parts.values()), state, atol=1e-4, rtol=0)
    torch.testing.assert_close(result.rest, torch.full((2,), -1.0), atol=1e-4, rtol=0)
    assert result.by_head().shape == (2, 6, 12)
