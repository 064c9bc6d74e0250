"""head_mask and prune_heads, as transformers v4 has them (v5 removed both): parity with v4's own outputs (a
reference it made, tests/models/data/transformers4_heads, scripts/make_head_mask_reference.py), on every backend and
layout; on every family against the definition (a head mask of 0 is the head's context zeroed, a fraction its
probabilities scaled; a pruned head is a masked one); the pruned model saved and loaded; bad input named."""

import json
from pathlib import Path

import pytest
import torch
from family_builders import random_encoder

import minialign as ma
from minialign.nn.config import families
from minialign.nn.precision import INT8, apply_precision

TOL = dict(atol=1e-5, rtol=0)
REFERENCE = Path(__file__).parent / "data" / "transformers4_heads"


@pytest.fixture(scope="module")
def reference():
    return torch.load(REFERENCE / "reference.pt", weights_only=True)


@pytest.mark.parametrize("family,backend", [(family, backend) for family in ("bert", "roberta", "electra",
                                                                           "distilbert", "mpnet")
                                            for backend in ("eager", "sdpa")]
                         + [pytest.param(family, "flex", marks=pytest.mark.slow) for family in ("bert", "mpnet")])
def test_head_mask_and_pruning_match_transformers_v4(family, backend, reference):
    ids, mask, head_mask = reference["input_ids"], reference["attention_mask"], reference["head_mask"]
    theirs = reference["outputs"][family]
    real = mask.bool()
    model = ma.Encoder.from_pretrained(REFERENCE / family, attn_backend=backend)
    with torch.no_grad():
        plain = model(ids, mask).last_hidden_state
        for unpad in (False, True):
            ours = model(ids, mask, head_mask=head_mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(ours[real], theirs["masked"][real], **TOL)
        attentions = model(ids, mask, head_mask=head_mask, output_attentions=True).attentions
    assert (plain - theirs["masked"])[real].abs().max() > 1e-3  # the mask changes the result
    for ours, want in zip(attentions, theirs["attentions"], strict=True):  # v4 returns the scaled probabilities
        torch.testing.assert_close(ours, want, **TOL)
    assert attentions[0][:, 0].abs().max() == 0 and attentions[2][:, 1].max() <= 0.5

    if "pruned" not in theirs:  # MPNet: v4's prune_heads leaves its relative bias at every head (it breaks)
        return
    pruned = ma.Encoder.from_pretrained(REFERENCE / f"{family}-pruned", attn_backend=backend)  # as v4 saved it
    assert pruned.config.pruned_heads == ((0, (0,)), (1, (2, 3)))
    assert [layer.attention.num_heads for layer in pruned.layers] == [3, 2, 4]
    with torch.no_grad():
        for unpad in (False, True):
            ours = pruned(ids, mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(ours[real], theirs["pruned"][real], **TOL)


def _model(arch, backend="sdpa"):
    return random_encoder(arch, backend)


def _batch():
    torch.manual_seed(1)
    ids = torch.randint(5, 300, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return ids, mask


# every family on eager and sdpa; flex (a compile per case) on a post-LN family, the pre-LN one and DeBERTa's score
FAMILY_BACKENDS = [(arch, backend) for arch in families() for backend in ("eager", "sdpa")] + [
    pytest.param(arch, "flex", marks=pytest.mark.slow) for arch in ("bert", "modernbert", "deberta-v2")]


@pytest.mark.parametrize("arch,backend", FAMILY_BACKENDS)
def test_head_mask_is_its_definition_on_every_family(arch, backend):
    """0 silences a head: its context zeroed (ma.patch); a fraction scales its probabilities before they weigh
    the values (eager's formula under ma.patch); padded and packed alike."""
    model = _model(arch, backend)
    ids, mask = _batch()
    real = mask.bool()
    head_mask = torch.ones(3, 4)
    head_mask[0, 0] = head_mask[1, 2] = 0
    with torch.no_grad():
        plain = model(ids, mask).last_hidden_state
        masked = model(ids, mask, head_mask=head_mask).last_hidden_state
        packed = model(ids, mask, head_mask=head_mask, unpad=True).last_hidden_state
        with ma.patch(model, {"layers.0.attention.context": ma.ablate_heads(0),
                              "layers.1.attention.context": ma.ablate_heads(2)}):
            ablated = model(ids, mask).last_hidden_state
        scaled = model(ids, mask, head_mask=torch.tensor([1.0, 0.25, 1.0, 1.0])).last_hidden_state  # every layer

        def quarter(probs):
            out = probs.clone()
            out[:, 1] *= 0.25
            return out

        with ma.patch(model, {"layers.*.attention.probs": quarter}):
            by_probabilities = model(ids, mask).last_hidden_state
    assert (masked - plain)[real].abs().max() > 1e-3
    torch.testing.assert_close(masked[real], ablated[real], **TOL)
    torch.testing.assert_close(packed[real], masked[real], **TOL)
    torch.testing.assert_close(scaled[real], by_probabilities[real], **TOL)


# MPNet's and T5's relative bias is one table of every layer's heads (Family.relative_bias); DeBERTa-v2's position
# projections are shared with the layers' key and query projections (DisentangledAttention.prune)
UNPRUNABLE = ("mpnet", "deberta-v2", "t5")


@pytest.mark.parametrize("arch", [a for a in families() if a not in UNPRUNABLE])
def test_a_pruned_head_is_a_masked_one_and_the_model_saves_pruned(arch, tmp_path):
    model = _model(arch)
    ids, mask = _batch()
    real = mask.bool()
    head_mask = torch.ones(3, 4)
    head_mask[0, 0] = head_mask[1, 2] = head_mask[1, 3] = 0
    with torch.no_grad():
        masked = model(ids, mask, head_mask=head_mask).last_hidden_state
    before = sum(p.numel() for p in model.parameters())
    model.prune_heads({1: [2]})
    model.prune_heads({0: [0], 1: [2, 3]})  # numbered as in the unpruned layer; 2 is gone already
    assert model.config.pruned_heads == ((0, (0,)), (1, (2, 3)))
    assert [layer.attention.num_heads for layer in model.layers] == [3, 2, 4]
    assert sum(p.numel() for p in model.parameters()) < before
    with torch.no_grad():
        pruned = model(ids, mask).last_hidden_state
        both = model(ids, mask, head_mask=head_mask).last_hidden_state  # a pruned head's entry is not read
        attentions = model(ids, mask, output_attentions=True).attentions
    torch.testing.assert_close(pruned[real], masked[real], **TOL)
    torch.testing.assert_close(both[real], masked[real], **TOL)
    assert [a.shape[1] for a in attentions] == [3, 2, 4]

    model.save_pretrained(tmp_path / "native")
    model.save_pretrained(tmp_path / "hf", layout="hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["pruned_heads"] == {"0": [0], "1": [2, 3]}
    for directory in ("native", "hf"):
        again = ma.Encoder.from_pretrained(tmp_path / directory)
        assert again.config.pruned_heads == model.config.pruned_heads
        with torch.no_grad():
            torch.testing.assert_close(again(ids, mask).last_hidden_state[real], pruned[real], **TOL)


def test_models_with_heads_prune_their_encoder():
    config = ma.Config(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48)
    for model in (ma.AlignModel(config, seed=0), ma.ClassifierModel(config, seed=0)):
        model.prune_heads({1: [0, 3]})
        assert model.config.pruned_heads == model.encoder.config.pruned_heads == ((1, (0, 3)),)
        assert model.encoder.layers[1].attention.num_heads == 2
        model(torch.randint(5, 300, (1, 6)), head_mask=torch.ones(4))


@pytest.mark.parametrize("arch", [a for a in UNPRUNABLE if a in families()])
def test_families_whose_heads_share_parameters_refuse_pruning(arch):
    model = _model(arch)
    with pytest.raises(ValueError, match=f"{arch} heads cannot be pruned: .*relative"):
        model.prune_heads({0: [1]})
    assert model.config.pruned_heads == ()


def test_bad_head_masks_and_prunings_are_named():
    model = _model("bert")
    ids, mask = _batch()
    with pytest.raises(ValueError, match=r"head_mask must be a tensor of shape \(4,\) or \(3, 4\).*got \(2, 4\)"):
        model(ids, mask, head_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="every head of layer 1"):
        model.prune_heads({1: [0, 1, 2, 3]})
    with pytest.raises(ValueError, match="layer 5 heads"):
        model.prune_heads({5: [0]})
    with pytest.raises(ValueError, match="pruned_heads must be a mapping"):
        ma.Config(vocab_size=30, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=8, pruned_heads=[1, 2])
    assert model.config.pruned_heads == () and model.layers[1].attention.num_heads == 4  # nothing half done
    apply_precision(model, INT8)
    with pytest.raises(ValueError, match="prune heads before choosing a precision: attention.qkv is a Int8Linear"):
        model.prune_heads({0: [1]})
