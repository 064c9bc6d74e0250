"""A batch the host built (nn/layout.py HostBatch: its lengths and the ids' range) runs without a host sync: the
layout, the packing indices, the length buckets and the vocabulary check come from the host's facts, and the
outputs are the same bits as the forward that reads them from the device (runtime/syncs.py counts the ops that
would make a GPU's host wait)."""

from __future__ import annotations

import pytest
import torch

from family_builders import FAMILIES, random_encoder, supported
from minialign.nn.layout import HostBatch
from minialign.runtime.syncs import count_syncs

ARCHS = [name for name in FAMILIES if supported(name)]
LENGTHS = [7, 3, 5, 8]
L = 8


def _batch(lengths=LENGTHS, length=L, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, 250, (len(lengths), length), generator=g).masked_fill(mask == 0, 1)
    return ids, mask


@pytest.mark.parametrize("backend", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_host_built_batch_runs_without_a_sync_and_gives_the_same_bits(arch, backend):
    model = random_encoder(arch, backend)
    ids, mask = _batch()
    host = HostBatch.of(ids, LENGTHS)
    for unpad in (True, False):
        for final in ("all", "first"):
            with torch.inference_mode():
                with count_syncs() as without:
                    expected = model(ids, mask, unpad=unpad, final_tokens=final).last_hidden_state
                with count_syncs() as syncs:
                    out = model(ids, mask, unpad=unpad, final_tokens=final, host=host).last_hidden_state
            assert syncs.total == 0, (unpad, final, dict(syncs.by_op))
            assert without.total > 0  # the counter sees the syncs the same forward makes without the host's facts
            assert torch.equal(out, expected), (unpad, final)


def test_a_batch_without_padding_from_the_host_runs_padded_without_a_sync():
    model = random_encoder("bert")
    ids, mask = _batch([L, L, L])
    host = HostBatch.of(ids, [L, L, L])
    with torch.inference_mode(), count_syncs() as syncs:
        out = model(ids, mask, host=host).last_hidden_state
    assert syncs.total == 0
    assert torch.equal(out, model(ids, mask).last_hidden_state.detach())


def test_head_models_pass_the_host_batch_on():
    import minialign as ma

    config = ma.Config(arch="roberta", vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48)
    ids, mask = _batch()
    host = HostBatch.of(ids, LENGTHS)
    for model in (ma.ClassifierModel(config, seed=0).eval(), ma.AlignModel(config, seed=0).eval()):
        with torch.inference_mode():
            expected = model(ids, mask, unpad=True)
            with count_syncs() as syncs:
                out = model(ids, mask, unpad=True, host=host)
        assert syncs.total == 0, type(model).__name__
        name = "logits" if hasattr(out, "logits") else "tri_label_logits"
        assert torch.equal(getattr(out, name), getattr(expected, name))


def test_the_vocabulary_is_checked_from_the_host_facts():
    model = random_encoder("bert")
    ids, mask = _batch()
    with pytest.raises(ValueError, match=r"input_ids hold 300, outside the vocabulary \[0, 300\)"):
        model(ids, mask, host=HostBatch(tuple(LENGTHS), (0, 300)))
    with pytest.raises(ValueError, match="one length per row"):
        model(ids, mask, host=HostBatch((7, 3), (0, 10)))


def test_host_batch_of_reads_the_cpu_tensor_and_checks_the_lengths():
    ids, _ = _batch()
    assert HostBatch.of(ids, LENGTHS) == HostBatch(tuple(LENGTHS), (int(ids.min()), int(ids.max())))
    with pytest.raises(ValueError, match="do not fit"):
        HostBatch.of(ids, [7, 3, 5])
    with pytest.raises(ValueError, match="do not fit"):
        HostBatch.of(ids, [7, 3, 5, 9])
    with pytest.raises(ValueError, match="on the host"):
        HostBatch.of(ids.to("meta"), LENGTHS)


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad])
def test_count_syncs_counts_what_makes_the_host_wait_and_nothing_else(mode):
    x = torch.arange(6.0)
    with mode():
        with count_syncs() as none:
            y = (x + 1).softmax(0)
            torch.repeat_interleave(torch.arange(3), torch.tensor([1, 2, 3]), output_size=6)
            x[torch.tensor([0, 2])]
        with count_syncs() as some:
            x.tolist()
            float(y.max())
            x[x > 2]
            torch.nonzero(x)
            torch.repeat_interleave(torch.tensor([1, 2]))
            bool(x.all())
    assert none.total == 0, dict(none.by_op)
    assert some.total == 6, dict(some.by_op)
    assert some.by_op["tolist"] == 1
