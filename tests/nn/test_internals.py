"""Internals toolkit: score functions against loop-over-positions formulas, capture, masks,
from-scratch initialisation."""

import math

import pytest
import torch

import minialign as ma
from minialign import masks

TOL = dict(atol=1e-5, rtol=0)


def tiny(score_fn="scaled_dot", **kw):
    return ma.Config(vocab_size=60, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=40,
                     max_position_embeddings=64, score_fn=score_fn, max_relative_distance=4, **kw)


def loop_scores(score, q, k):
    """e[b, h, i, j] from each formula, one position pair at a time."""
    B, H, L, D = q.shape
    e = torch.empty(B, H, L, k.shape[2])
    for b in range(B):
        for h in range(H):
            for i in range(L):
                for j in range(k.shape[2]):
                    qi, kj = q[b, h, i], k[b, h, j]
                    if isinstance(score, ma.nn.score_functions.ScaledDot):
                        e[b, h, i, j] = qi @ kj / math.sqrt(D)
                    elif isinstance(score, ma.nn.score_functions.General):
                        e[b, h, i, j] = qi @ score.weight[h] @ kj
                    elif isinstance(score, ma.nn.score_functions.Bilinear):
                        e[b, h, i, j] = (score.weight[h] @ qi) @ (score.weight[h] @ kj)
                    elif isinstance(score, ma.nn.score_functions.Additive):
                        e[b, h, i, j] = score.v[h] @ torch.tanh(score.w_query[h] @ qi + score.w_key[h] @ kj)
                    else:
                        r = max(-score.max_distance, min(score.max_distance, j - i)) + score.max_distance
                        e[b, h, i, j] = score.weight[h, r] @ qi
    return e


def loop_attention(score, q, k, v, keep):
    """softmax over allowed keys of the loop scores, weighted sum of values; keep (B, L, L) bool."""
    e = loop_scores(score, q, k).masked_fill(~keep[:, None], torch.finfo(torch.float32).min)
    return torch.softmax(e, -1) @ v


@pytest.mark.parametrize("score_fn", ma.SCORE_FUNCTIONS)
@pytest.mark.parametrize("backend", ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)])
def test_score_functions_match_their_formula(score_fn, backend):
    if backend == "flex" and score_fn in ("additive", "scaled_dot"):
        pytest.skip("additive is dense only; scaled_dot flex is covered in test_backends")
    model = ma.Encoder(tiny(score_fn), attn_backend=backend, seed=0).eval()
    with torch.no_grad():
        for p in model.layers[0].attention.score.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # away from the initial values
    ids = torch.randint(1, 60, (2, 9))
    padding = masks.padding_mask([9, 5], 9)
    for mask, keep in ((padding.long(), masks.bidirectional_mask(padding)),
                       (masks.left_only_mask(padding), masks.left_only_mask(padding))):
        with torch.no_grad(), ma.capture(model) as cap:
            model(ids, attention_mask=mask)
        attn = model.layers[0].attention
        q, k, v = (cap[f"layers.0.attention.{n}"] for n in "qkv")
        expected = loop_attention(attn.score, q, k, v, keep)
        real = padding
        got = cap["layers.0.attention.context"]
        torch.testing.assert_close(got.transpose(1, 2)[real], expected.transpose(1, 2)[real], **TOL)
        raw = loop_scores(attn.score, q, k)
        torch.testing.assert_close(cap["layers.0.attention.scores_raw"], raw, **TOL)
        assert cap["layers.0.attention.probs"].shape == (2, 3, 9, 9)


def test_score_function_parameters_are_per_model_and_trainable():
    model = ma.Encoder(tiny("additive"), seed=0)
    names = [n for n, _ in model.named_parameters() if ".score." in n]
    assert "layers.0.attention.score.w_query" in names and "layers.1.attention.score.v" in names
    with pytest.raises(ValueError, match="no transformers equivalent"):
        tiny("location").to_hf()
    with pytest.raises(ValueError, match="score_fn"):
        tiny("cosine")


def test_general_and_bilinear_start_as_scaled_dot():
    ids = torch.randint(1, 60, (2, 7))
    ref = ma.Encoder(tiny(), seed=0).eval()
    for name in ("general", "bilinear"):
        other = ma.Encoder(tiny(name), seed=0).eval()
        other.load_state_dict(ref.state_dict(), strict=False)
        with torch.no_grad():
            torch.testing.assert_close(other(ids).last_hidden_state, ref(ids).last_hidden_state, **TOL)


def test_capture_records_everything_without_changing_results():
    model = ma.AlignModel(tiny(), seed=0).eval()
    ids = torch.randint(1, 60, (2, 8))
    mask = masks.padding_mask([8, 6], 8).long()
    with torch.no_grad():
        plain = model(ids, attention_mask=mask, output_hidden_states=True)
        with ma.capture(model) as cap:
            captured = model(ids, attention_mask=mask, output_hidden_states=True)
    assert torch.equal(plain.tri_label_logits, captured.tri_label_logits)
    expected = {"encoder.embeddings.word", "encoder.embeddings.position", "encoder.embeddings.token_type",
                "encoder.embeddings.norm", "encoder.pooler.output"}
    for i in range(2):
        for role in ("input", "attention.q", "attention.k", "attention.v", "attention.scores_raw",
                     "attention.scores_masked", "attention.probs", "attention.context", "attention.output",
                     "attention_residual", "attention_norm", "ffn.intermediate", "ffn_output", "ffn_residual",
                     "output"):
            expected.add(f"encoder.layers.{i}.{role}")
    assert expected <= set(cap)
    assert cap["encoder.layers.0.attention.q"].shape == (2, 3, 8, 8)  # (B, H, L, D)
    assert cap["encoder.layers.1.ffn.intermediate"].shape == (2, 8, 40)
    for i in range(2):
        assert torch.equal(cap[f"encoder.layers.{i}.output"], captured.hidden_states[i + 1])
    masked = cap["encoder.layers.0.attention.scores_masked"]
    assert (masked[1, :, :, 6:] < -1e30).all() and torch.equal(cap["encoder.layers.0.attention.scores_raw"][0],
                                                               masked[0])
    probs = cap["encoder.layers.0.attention.probs"]
    torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
    assert not ma.nn.capture.capturing()


def test_embedding_decomposition():
    model = ma.Encoder(tiny(), seed=0).eval()
    ids = torch.randint(1, 60, (2, 8))
    with torch.no_grad(), ma.capture(model) as cap:
        out = model(ids, token_type_ids=torch.ones_like(ids), output_hidden_states=True)
    total = cap["embeddings.word"] + cap["embeddings.position"] + cap["embeddings.token_type"]
    torch.testing.assert_close(model.embeddings.norm(total), cap["embeddings.norm"], atol=1e-6, rtol=0)
    torch.testing.assert_close(cap["embeddings.norm"], out.hidden_states[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(cap["embeddings.token_type"][0, 0], model.embeddings.token_type.weight[1])


def test_capture_beside_sdpa_records_probabilities():
    model = ma.Encoder(tiny(), seed=0, attn_backend="sdpa").eval()
    eager = ma.Encoder(tiny(), seed=0, attn_backend="eager").eval()
    ids = torch.randint(1, 60, (1, 6))
    with torch.no_grad():
        plain = model(ids).last_hidden_state
        with ma.capture(model) as cap:
            captured = model(ids).last_hidden_state
        reference = eager(ids, output_attentions=True).attentions[0]
    assert torch.equal(plain, captured)
    torch.testing.assert_close(cap["layers.0.attention.probs"], reference, **TOL)


def test_left_only_representation_ignores_the_future():
    """Under the left-only mask, token i's representation is the same whatever follows it."""
    model = ma.Encoder(tiny(), seed=0).eval()
    ids = torch.randint(1, 60, (1, 10))
    full = masks.left_only_mask(torch.ones(1, 10, dtype=torch.bool))
    prefix = masks.left_only_mask(torch.ones(1, 6, dtype=torch.bool))
    with torch.no_grad():
        a = model(ids, attention_mask=full).last_hidden_state[:, :6]
        b = model(ids[:, :6], attention_mask=prefix).last_hidden_state
        bidirectional = model(ids).last_hidden_state[:, :6]
    torch.testing.assert_close(a, b, **TOL)
    assert not torch.allclose(a[:, :5], bidirectional[:, :5], atol=1e-3)


def test_mask_helpers():
    padding = masks.padding_mask([3, 1], 4)
    assert padding.tolist() == [[True, True, True, False], [True, False, False, False]]
    left = masks.left_only_mask(padding)
    assert left[0].tolist() == [[True, False, False, False], [True, True, False, False],
                                [True, True, True, False], [True, True, True, False]]
    types = torch.tensor([[0, 0, 1, 1]])
    assert masks.segment_mask(types)[0, 0].tolist() == [True, True, False, False]
    custom = masks.custom_mask(lambda b, i, j: abs(i - j) <= 1, 1, 4)
    assert custom[0].sum().item() == 10
    assert torch.equal(masks.bidirectional_mask(padding)[1, 3], torch.tensor([True, False, False, False]))


def test_from_scratch_initialisation_is_bert_and_seeded():
    config = tiny()
    a, b, c = ma.AlignModel(config, seed=7), ma.AlignModel(config, seed=7), ma.AlignModel(config, seed=8)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.encoder.layers[0].ffn.up.weight, c.encoder.layers[0].ffn.up.weight)
    big = ma.Encoder(ma.Config(vocab_size=100, hidden_size=256, num_layers=1, num_heads=4, intermediate_size=512),
                     seed=0)
    assert abs(big.layers[0].ffn.up.weight.std().item() - 0.02) < 1e-3
    assert (big.layers[0].ffn.up.bias == 0).all() and (big.layers[0].attention_norm.weight == 1).all()
    assert (big.embeddings.word.weight[0] == 0).all()  # the padding row
    state = torch.random.get_rng_state()
    ma.Encoder(config, seed=1)
    assert torch.equal(state, torch.random.get_rng_state())  # seeding leaves the global RNG alone


def test_capture_is_a_backend_row_and_ignores_unpad_and_first_tokens():
    """Under capture the fallback rule hands out the row's recording twin: padded, every token, the
    model's own output; the forward itself asks nothing about capture."""
    from minialign.nn.attention import BACKENDS, choose_backend

    need = dict(probabilities=False, score_form="dot", dropout=False, query_subset=False)
    assert choose_backend("flex", **need) is BACKENDS["flex"]
    model = ma.Encoder(tiny(), seed=0, attn_backend="sdpa").eval()
    with ma.capture(model):
        row = choose_backend("sdpa", **need)
        assert row.whole and row.name == "sdpa+capture" and not row.packed and not row.query_subset
    ids = torch.randint(1, 60, (3, 9))
    mask = masks.padding_mask([9, 5, 2], 9).long()
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).last_hidden_state
        with ma.capture(model) as cap:
            out = model(ids, attention_mask=mask, unpad=True, final_tokens="first").last_hidden_state
    assert torch.equal(out, plain)  # every token, padded: the plain forward's numbers
    assert cap["layers.1.attention.probs"].shape == (3, 3, 9, 9)


def test_prepare_mask_takes_one_object():
    """A backend's prepare reads one AttentionInputs (prepare_mask's keyword form of 0.1 was removed in 0.3)."""
    from minialign.nn.attention import BACKENDS, prepare_mask
    from minialign.nn.inputs import AttentionInputs
    from minialign.nn.layout import padded

    mask = masks.padding_mask([5, 3], 5)
    new = prepare_mask(BACKENDS["sdpa"], AttentionInputs(mask, padded(2, 5), torch.float32, 2, queries="first",
                                                         window=1))
    assert new.value.shape == (2, 1, 1, 5)
    assert torch.equal(new.value[1, 0, 0] == 0, torch.tensor([True, True, False, False, False]))  # window, padding
    with pytest.raises(ValueError, match="queries"):
        AttentionInputs(mask, padded(2, 5), torch.float32, 2, queries="last")


def test_a_family_is_one_class(monkeypatch):
    """The seam (models/family.py): a pre-LN family with a final norm, per-forward layer inputs and
    RoBERTa's classification head, declared in one class plus its config row, runs through the
    shared Encoder, ClassifierModel and loader, padded, packed or for the first tokens only."""
    import dataclasses

    from minialign import convert
    from minialign.loading import Checkpoint
    from minialign.loading import build
    from minialign.models import family as families
    from minialign.models.bert import Bert
    from minialign.models.heads import Heads, SequenceClassification, SequenceClassificationHead
    from minialign.nn.attention import BACKENDS, PreparedMask, attention, attention_bias
    from minialign.nn.layers import FeedForward, SelfAttention

    from minialign.convert.families import Format, bert as bert_format
    from minialign.models.bert import BertConfig
    from minialign.nn import config as configs

    monkeypatch.setattr(configs, "_FAMILIES", dict(configs._FAMILIES))  # the toy registers in a copy

    @dataclasses.dataclass(frozen=True)
    class ToyConfig(BertConfig):
        format = Format(dataclasses.replace(bert_format.CONFIG, model_type="toy"), bert_format.NAMES)
        arch: str = "toy"
    seen = []

    class PreLNLayer(torch.nn.Module):
        window = None  # every key

        def __init__(self, config):
            super().__init__()
            self.attention_norm = torch.nn.LayerNorm(config.hidden_size)
            self.attention = SelfAttention(config)
            self.ffn_norm = torch.nn.LayerNorm(config.hidden_size)
            self.ffn = FeedForward(config)

        def forward(self, x, mask, queries=None, *, gate):
            a, probs = self.attention(self.attention_norm(x), mask, queries)
            x = (x if queries is None else queries(x)) + gate * a
            return x + self.ffn(self.ffn_norm(x)), probs

    class Toy(Bert):
        config_class = ToyConfig
        parts = {"final_norm": lambda config: torch.nn.LayerNorm(config.hidden_size)}

        @classmethod
        def heads(cls, config):
            return Heads(sequence_classification=SequenceClassification(pool="first", dense_activation="tanh"))

        @classmethod
        def layers(cls, config):
            return [PreLNLayer(config) for _ in range(config.num_layers)]

        @classmethod
        def layer_inputs(cls, encoder, inputs):
            seen.append(tuple(inputs.position_ids.shape))
            return {"gate": torch.tensor(0.5)}

        @classmethod
        def finish(cls, encoder, x):
            return encoder.final_norm(x)

    config = tiny(arch="toy", labels=("a", "b"))
    assert families.family_of(config) is Toy
    model = ma.Encoder(config, seed=0).eval()
    assert {"final_norm.weight", "layers.1.ffn_norm.bias", "pooler.dense.weight"} <= set(model.state_dict())
    assert ma.Encoder.owns(config) == ("embeddings", "layers", "final_norm", "pooler")
    ids = torch.randint(1, 60, (3, 9))
    mask = masks.padding_mask([9, 5, 2], 9).long()
    with torch.no_grad():
        x = model.embeddings(ids, torch.zeros_like(ids), model.embeddings.position_ids(ids))
        eager = PreparedMask(BACKENDS["eager"], attention_bias(mask, 3, 9, torch.float32))
        for layer in model.layers:  # the formula, by hand, on the eager function
            q, k, v = layer.attention.qkv(layer.attention_norm(x)).view(3, 9, 3, 3, 8).permute(2, 0, 3, 1, 4)
            a = attention(q, k, v, eager)[0]
            x = x + 0.5 * layer.attention.output(a.transpose(1, 2).reshape(3, 9, 24))
            x = x + layer.ffn(layer.ffn_norm(x))
        expected = model.final_norm(x)
        real = mask.bool()
        padded = model(ids, attention_mask=mask)
        packed = model(ids, attention_mask=mask, unpad=True)
        first = model(ids, attention_mask=mask, unpad=True, final_tokens="first")
    torch.testing.assert_close(padded.last_hidden_state[real], expected[real], **TOL)
    torch.testing.assert_close(packed.last_hidden_state[real], expected[real], **TOL)
    torch.testing.assert_close(first.last_hidden_state[:, 0], expected[:, 0], **TOL)
    assert seen == [(3, 9), (1, 16), (1, 16)]  # the forward's layout: padded, then packed
    classifier = ma.ClassifierModel(config, seed=0)
    assert classifier.encoder.pooler is None and isinstance(classifier.classifier, SequenceClassificationHead)
    assert classifier.classifier.dense.activation == "tanh"
    tensors = {f"encoder.{k}": v for k, v in model.state_dict().items()}
    loaded = build(ma.Encoder, Checkpoint(config, tensors, "toy"))
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())


def test_the_torch_free_names_are_the_tables():
    """nn/choices.py declares the names the command line offers without torch; the tables are built over them."""
    from minialign.nn import choices, config, score_functions

    assert tuple(score_functions.SCORE_CLASSES) == choices.SCORE_FUNCTIONS == ma.SCORE_FUNCTIONS
    assert config.DTYPES == {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
