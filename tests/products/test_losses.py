"""AlignScore's training losses: values and gradients against the original formulas on
transformers-built heads, and a few optimiser steps that lower the loss."""

import math

import pytest
import torch
import torch.nn as nn
from conftest import write_alignscore_ckpt

import minialign as ma


@pytest.fixture
def models(tmp_path):
    path, ref = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta", hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
    ref["backbone"].save_pretrained(tmp_path / "bb")
    ours = ma.AlignModel.from_pretrained(path, backbone=str(tmp_path / "bb"))
    return ours, ref


def _labels(B=4, L=10, vocab=211):
    g = torch.Generator().manual_seed(3)
    mlm = torch.full((B, L), -100)
    mlm[:, 2:5] = torch.randint(5, vocab, (B, 3), generator=g)
    return dict(mlm_labels=mlm, align_labels=torch.tensor([1, 0, -100, 1]),
                tri_labels=torch.tensor([0, 2, 1, -100]), reg_labels=torch.tensor([0.9, -100.0, 0.1, 0.5]))


def _original(ref, ids, labels):
    """AlignScore model.py forward + training_step_end, dropout off, on transformers modules."""
    base = ref["backbone"](ids)
    prediction = ref["mlm_head"](base.last_hidden_state)
    pooled = base.pooler_output
    ce = nn.CrossEntropyLoss(reduction="sum")
    mlm = ce(prediction.view(-1, prediction.size(-1)), labels["mlm_labels"].view(-1))
    bin_ = ce(ref["bin_layer"](pooled).view(-1, 2), labels["align_labels"].view(-1)) / math.log(2)
    tri = ce(ref["tri_layer"](pooled).view(-1, 3), labels["tri_labels"].view(-1)) / math.log(3)
    target = labels["reg_labels"].view(-1)
    keep = target != -100.0
    reg = ((ref["reg_layer"](pooled).view(-1)[keep] - target[keep]) ** 2).sum()
    counts = [(labels[k].view(-1) != -100).sum() for k in ("mlm_labels", "align_labels", "tri_labels", "reg_labels")]
    means = [s / n for s, n in zip((mlm, bin_, tri, reg), counts)]
    return 0.5 * means[0] + means[1] + means[2] + means[3], means, counts


def test_losses_and_head_gradients_match_original(models):
    ours, ref = models
    ours.train()
    ours.dropout.p = 0.0  # compare deterministically
    for module in ref.values():
        module.train()
    ids = torch.randint(5, 200, (4, 10))
    labels = _labels()
    losses = ma.alignscore_losses(ours(ids, mlm=True), **labels)
    expected_total, expected, counts = _original(ref, ids, labels)
    torch.testing.assert_close(losses.total, expected_total, atol=1e-5, rtol=1e-5)
    for got, want in zip((losses.mlm, losses.bin, losses.tri, losses.reg), expected):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert losses.counts == {"mlm": 12, "bin": 3, "tri": 3, "reg": 3}
    losses.total.backward()
    expected_total.backward()
    for name in ("bin_layer", "tri_layer", "reg_layer"):
        torch.testing.assert_close(getattr(ours, name).weight.grad, ref[name].weight.grad, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(getattr(ours, name).bias.grad, ref[name].bias.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.mlm_head.dense.weight.grad, ref["mlm_head"].dense.weight.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.mlm_head.decoder.weight.grad, ref["mlm_head"].decoder.weight.grad, atol=1e-5,
                               rtol=1e-4)
    torch.testing.assert_close(ours.encoder.pooler.dense.weight.grad, ref["backbone"].pooler.dense.weight.grad,
                               atol=1e-5, rtol=1e-4)


def test_ignored_labels_and_missing_losses():
    model = ma.AlignModel(ma.Config(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=20),
                          seed=0)
    out = model(torch.randint(1, 40, (2, 5)))
    losses = ma.alignscore_losses(out, tri_labels=torch.tensor([-100, -100]), align_labels=torch.tensor([1, 0]))
    assert losses.tri.item() == 0.0 and losses.counts["tri"] == 0
    assert losses.mlm.item() == 0.0 and "mlm" not in losses.counts
    torch.testing.assert_close(losses.total, losses.bin)
    with pytest.raises(ValueError, match="mlm=True"):
        ma.alignscore_losses(out, mlm_labels=torch.zeros(2, 5, dtype=torch.long))


def test_a_few_steps_lower_the_loss():
    torch.manual_seed(0)
    config = ma.Config(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
                       max_position_embeddings=32)
    model = ma.AlignModel(config, seed=0).train()
    ids = torch.randint(3, 40, (8, 12))
    labels = dict(tri_labels=torch.arange(8) % 3, align_labels=(torch.arange(8) % 3 == 0).long(),
                  reg_labels=torch.linspace(0, 1, 8), mlm_labels=torch.where(torch.rand(8, 12) < 0.2, ids, -100))
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    history = []
    for _ in range(20):
        losses = ma.alignscore_losses(model(ids, mlm=True), **labels)
        optimiser.zero_grad()
        losses.total.backward()
        optimiser.step()
        history.append(losses.total.item())
    assert history[-1] < 0.7 * history[0], history
