"""minialign.nn.analysis against the definitions: rollout (Abnar & Zuidema 2020) computed by hand, entropy of known
maps, and the residual decomposition summing to the last hidden state on a post-LN and a pre-LN family."""

import math

import pytest
import torch
from family_builders import random_encoder

import minialign as ma
from minialign.nn import analysis


def test_head_entropy_of_known_maps():
    uniform = torch.full((1, 1, 4, 4), 0.25)
    one_hot = torch.zeros(1, 1, 4, 4)
    one_hot[..., 0] = 1
    probs = torch.cat([uniform, one_hot], dim=1)  # (1, 2, 4, 4)
    torch.testing.assert_close(analysis.head_entropy(probs), torch.tensor([math.log(4), 0.0]))
    half = torch.zeros(1, 1, 4, 4)
    half[..., :2] = 0.5  # the real queries' entropy only (the last query is padding)
    half[:, :, 3] = 0.25
    got = analysis.head_entropy(half, torch.tensor([[1, 1, 1, 0]]))
    torch.testing.assert_close(got, torch.tensor([math.log(2)]))


def test_rollout_is_the_product_of_the_residual_maps():
    torch.manual_seed(0)
    layers = [torch.softmax(torch.randn(2, 3, 5, 5), -1) for _ in range(3)]
    expected = None
    for a in layers:
        m = 0.5 * a.mean(1) + 0.5 * torch.eye(5)
        m = m / m.sum(-1, keepdim=True)
        expected = m if expected is None else m @ expected
    got = analysis.attention_rollout(layers)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got.sum(-1), torch.ones(2, 5))  # each row a distribution over input tokens
    torch.testing.assert_close(analysis.attention_rollout(layers[:1], residual=False), layers[0].mean(1))


@pytest.mark.parametrize("family", ["bert", "modernbert", "eurobert"])
def test_the_parts_sum_to_the_last_hidden_state(family, tiny_family):
    """Post-LN (BERT) and pre-LN (ModernBERT, its final norm; EuroBERT, a final RMSNorm: no bias, so no "norm
    biases" part): embeddings + every attention and feed-forward + the norms' biases == last_hidden_state, exactly up
    to float rounding, on real and padded tokens."""
    directory, _ = tiny_family.hf(family)
    model = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    batch = ma.Tokenizer.from_pretrained(directory)(["The tower was built in Paris.", "Short."])
    with torch.no_grad(), ma.capture(model) as cap:
        out = model(**batch)
    parts = analysis.residual_decomposition(model, cap)
    layers = model.config.num_layers
    biases = [] if family == "eurobert" else ["norm biases"]
    assert set(parts) == {"embeddings", *biases, *(f"layers.{i}.{p}" for i in range(layers)
                                                   for p in ("attention", "ffn"))}
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(sum(parts.values())[real], out.last_hidden_state[real], atol=1e-4, rtol=0)
    assert all(p.shape == out.last_hidden_state.shape for p in parts.values())
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the model left as it was
    with pytest.raises(ValueError, match="eval-mode"):
        analysis.residual_decomposition(model.train(), cap)


@pytest.mark.parametrize("arch", ["gemma3_text", "qwen3"])
def test_a_sandwich_norm_and_a_unit_offset_scale_decompose(arch):
    """Gemma 3: each attention's update through its own post-attention RMSNorm, every scale 1 + weight (spread_norm
    reads Gemma3RMSNorm's `rms` / `unit_offset`); Qwen 3: plain pre-RMSNorm layers. The parts sum to the state."""
    from family_builders import random_encoder

    model = random_encoder(arch)
    with torch.no_grad():
        for parameter in model.parameters():  # norms away from their initial identity
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)))
    ids, mask = torch.randint(5, 250, (2, 7)), torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    with torch.no_grad(), ma.capture(model) as cap:
        state = model(ids, attention_mask=mask).last_hidden_state
    parts = analysis.residual_decomposition(model, cap)
    torch.testing.assert_close(sum(parts.values())[mask.bool()], state[mask.bool()], atol=1e-5, rtol=0)


def test_an_unknown_norm_is_named():
    with pytest.raises(ValueError, match="Identity is neither"):
        analysis.spread_norm(torch.nn.Identity(), torch.zeros(1, 2, 4), {"a": torch.zeros(1, 2, 4)})


def test_the_decomposition_refuses_deberta_v2s_convolution():
    """DeBERTa-v2's ConvLayer after the first layer adds a part the decomposition does not split: refused, not a
    sum that misses it (whatever the capture recorded: the model declares the convolution)."""
    config = ma.Config(arch="deberta-v2", vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                       intermediate_size=40, relative_attention=True, pos_att_type=("p2c", "c2p"), conv_kernel_size=3)
    model = ma.Encoder(config, seed=0).eval()
    with torch.no_grad(), ma.capture(model) as cap:
        model(torch.randint(5, 100, (1, 7)))
    with pytest.raises(ValueError, match="does not cover DeBERTa-v2's convolution"):
        analysis.residual_decomposition(model, cap)


@pytest.mark.parametrize("head", ["ClassifierModel", "MaskedLMModel"])
def test_a_head_models_own_capture_decomposes_under_its_encoders_prefix(head):
    """A head model's capture (the encoder's names under "encoder.") decomposes without a second forward: passed the
    head model (the prefix found) or its encoder with prefix="encoder.", the parts of a capture of the bare encoder."""
    config = ma.Config(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=40)
    model = getattr(ma, head)(config, seed=0).eval()
    ids = torch.randint(5, 100, (2, 6))
    with torch.no_grad(), ma.capture(model) as cap:
        model(ids)
    with torch.no_grad(), ma.capture(model.encoder) as bare:
        model.encoder(ids)
    expected = analysis.residual_decomposition(model.encoder, bare)
    for parts in (analysis.residual_decomposition(model, cap),
                  analysis.residual_decomposition(model.encoder, cap, prefix="encoder.")):
        assert parts.keys() == expected.keys()
        assert all(torch.equal(parts[n], expected[n]) for n in parts)
    with pytest.raises(ValueError, match=r"lacks .*'encoder\.'"):
        analysis.residual_decomposition(model.encoder, cap)  # the bare names are not in a head model's capture


def test_the_parts_are_detached_unless_asked():
    """Default: computed under no_grad, no graph (the norms' weights require grad; a capture(detach=False) forward
    keeps its records in the graph). detach=False: the parts stay in the graph, and a gradient reaches the weights."""
    config = ma.Config(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=40)
    model = ma.Encoder(config, seed=0).eval()
    with ma.capture(model, detach=False) as cap:
        model(torch.randint(5, 100, (1, 6)))
    assert not any(p.requires_grad for p in analysis.residual_decomposition(model, cap).values())
    parts = analysis.residual_decomposition(model, cap, detach=False)
    assert all(p.requires_grad for n, p in parts.items() if n != "norm biases")
    parts["layers.1.attention"].sum().backward()
    assert model.layers[1].attention.qkv.weight.grad is not None


def test_logit_lens_ends_in_the_models_own_predictions():
    config = ma.Config(vocab_size=120, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
                       tie_word_embeddings=False)
    model = ma.AlignModel(config, seed=0).eval()
    ids = torch.randint(5, 120, (2, 9))
    with torch.no_grad(), ma.capture(model) as cap:
        out = model(ids, mlm=True)
        lens = analysis.logit_lens(model, cap)
    assert lens.shape == (3, 2, 9, 120)
    torch.testing.assert_close(lens[-1], out.prediction_logits, atol=1e-5, rtol=0)
    assert (lens[0] - lens[-1]).abs().max() > 1e-3  # earlier layers read otherwise
    with pytest.raises(ValueError, match="no masked-LM head"):
        analysis.logit_lens(ma.Encoder(config, seed=0), cap)


def test_logit_lens_reads_deberta_v2s_first_layer_after_its_convolution():
    """The convolution is the first layer's last step (transformers' hidden_states[1]): a one-layer DeBERTa-v2's lens
    is the model's own prediction, which the state before the convolution would not give."""
    config = ma.Config(arch="deberta-v2", vocab_size=100, hidden_size=32, num_layers=1, num_heads=4,
                       intermediate_size=40, relative_attention=True, pos_att_type=("p2c", "c2p"), conv_kernel_size=3)
    model = ma.MaskedLMModel(config, seed=0).eval()
    with torch.no_grad(), ma.capture(model) as cap:
        out = model(torch.randint(5, 100, (2, 7)))
        lens = analysis.logit_lens(model, cap)
        before = model.mlm_head(cap["encoder.layers.0.output"], model.encoder.embeddings.word.weight)
    torch.testing.assert_close(lens[-1], out.logits, atol=1e-5, rtol=0)
    assert (before - out.logits).abs().max() > 1e-3  # the state before the convolution reads otherwise


def test_attention_flow_is_the_max_flow_of_the_attention_graph():
    """Against its definition (Abnar & Zuidema 2020, sec. 3), solved by networkx (torch's own dependency) on the
    same graph: node (l, t), edge (l - 1, j) -> (l, i) of capacity A_l[i, j], heads averaged, residual mixed in."""
    import networkx

    torch.manual_seed(0)
    layers = [torch.softmax(torch.randn(2, 3, 5, 5), dim=-1) for _ in range(3)]
    got = analysis.attention_flow(layers)
    assert got.shape == (2, 5, 5)
    for b in range(2):
        graph = networkx.DiGraph()
        for n, layer in enumerate(layers, start=1):
            a = 0.5 * layer[b].mean(0).double() + 0.5 * torch.eye(5, dtype=torch.float64)
            a = a / a.sum(-1, keepdim=True)
            for i in range(5):
                for j in range(5):
                    graph.add_edge((n - 1, j), (n, i), capacity=float(a[i, j]))
        for i in range(5):
            for j in range(5):
                expected = networkx.maximum_flow_value(graph, (0, j), (3, i))
                assert abs(float(got[b, i, j]) - expected) < 1e-5, (b, i, j)
    one = analysis.attention_flow(layers[:1], residual=False)  # one layer: each flow is its one edge
    torch.testing.assert_close(one, layers[0].mean(1))
    with pytest.raises(ValueError, match="at least one layer"):
        analysis.attention_flow([])
