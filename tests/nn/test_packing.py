"""The packing value (layout.py) and the batching engine (batching.py), on their own."""

import pytest
import torch
from conftest import WORDS

from minialign.nn import layout as layouts
from minialign.runtime.engine import BatchEngine, pad


def test_packed_layout_round_trip_and_first_tokens():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    layout = layouts.packed(mask)
    assert layout.packed and layout.cu_seqlens.tolist() == [0, 4, 6, 7]
    assert layout.host_lengths == [4, 2, 1] and layout.document.tolist() == [0, 0, 0, 0, 1, 1, 2]
    x = torch.arange(12, dtype=torch.float32).view(3, 4, 1) + 1
    packed = layout.pack(x)
    assert packed.shape == (1, 7, 1) and packed.flatten().tolist() == [1, 2, 3, 4, 5, 6, 9]
    back = layout.unpack(packed)
    assert torch.equal(back, x * mask[..., None])  # padding comes back as zeros
    first = layout.first_tokens(packed)
    assert first.flatten().tolist() == [1, 5, 9] and layout.batch_first(first).shape == (3, 1, 1)
    padded = layouts.padded(3, 4)
    assert not padded.packed and padded.pack(x) is x and padded.unpack(x) is x
    assert torch.equal(padded.first_tokens(x), x[:, :1])


@pytest.mark.parametrize("bad", [torch.tensor([[0, 1, 1]]), torch.tensor([[1, 0, 1]]), torch.tensor([[0, 0, 0]]),
                                 torch.ones(1, 3, 3)])
def test_packed_layout_needs_right_padding(bad):
    with pytest.raises(ValueError, match="right-padded"):
        layouts.packed(bad)


def test_pad_is_right_padding_with_types():
    out = pad([[5, 6, 7], [8]], [[0, 0, 1], [0]], pad_id=1)
    assert out["input_ids"].tolist() == [[5, 6, 7], [8, 1, 1]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert out["token_type_ids"].tolist() == [[0, 0, 1], [0, 0, 0]]
    assert "token_type_ids" not in pad([[5]], [[0]], pad_id=0, token_types=False)
    assert pad([[5]], [[0]], pad_id=0, length=4)["input_ids"].shape == (1, 4)


@pytest.fixture(scope="module")
def tokenizer(bpe_dir):
    from minialign.text.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(bpe_dir)


@pytest.mark.parametrize("packed", [True, False])
def test_engine_dedups_bounds_batches_and_keeps_input_order(tokenizer, packed):
    texts = [" ".join(WORDS[: 3 + (i * 7) % 40]) for i in range(30)]
    engine = BatchEngine(tokenizer, batch_size=4, max_tokens=60, packed=packed)
    seen = []

    def forward(batch):  # one result per row: its real length and second id, so order can be checked
        ids, mask = batch["input_ids"], batch["attention_mask"]
        seen.append((tuple(ids.shape), int(mask.sum())))
        return torch.stack([mask.sum(1).float(), ids[:, 1].float()], dim=1)

    singles = texts + texts[:10]  # with duplicates
    pairs = [(texts[i], texts[-i]) for i in range(12)] + [(texts[0], texts[1])] * 3
    for inputs, expected in ((singles, [e.ids for e in tokenizer.encode(singles)]),
                             (pairs, [e.ids for e in tokenizer.encode(*map(list, zip(*pairs)))])):
        seen.clear()
        results = engine.run(inputs, forward)
        assert results.values[:, 0].tolist() == [len(e) for e in expected]
        assert results.values[:, 1].tolist() == [e[1] for e in expected]
        assert results.truncated.tolist() == [0] * len(inputs)
        assert sum(rows for (rows, _), _ in seen) == len(set(inputs))  # each distinct input ran once
        for (rows, length), real in seen:
            assert rows <= 4 and ((real if packed else rows * length) <= 60 or rows == 1)
    assert engine.run([], forward).values.numel() == 0
    with pytest.raises(ValueError, match="mix"):
        engine.run([texts[0], (texts[0], texts[1])], forward)


def test_engine_reports_tokens_cut_by_the_window(tokenizer):
    engine = BatchEngine(tokenizer, max_length=16)
    long, short = " ".join(WORDS[:40]), "the claim"
    full = len(tokenizer.encode([long], max_length=10_000)[0].ids)
    lengths = lambda b: b["attention_mask"].sum(1, keepdim=True)  # noqa: E731
    singles = engine.run([long, short], lengths)
    assert singles.values[:, 0].tolist() == [16, len(tokenizer.encode([short])[0].ids)]
    assert singles.truncated.tolist() == [full - 16, 0]
    pair = engine.run([(long, short)], lengths)
    n_short = len(tokenizer.encode([short], max_length=100)[0].ids) - 2  # without <s> </s>
    assert pair.values[:, 0].tolist() == [16]
    assert pair.truncated.tolist() == [(full - 2) + n_short + 4 - 16]  # <s> A </s></s> B </s>


def test_engine_returns_ragged_rows_in_input_order_within_a_run_s_window(tokenizer):
    """A forward returning one tensor per sequence (a multi-vector encoder's token vectors): a list in input order,
    a repeated input its own copy; max_length= cuts this run only."""
    engine = BatchEngine(tokenizer, batch_size=2, max_length=40)
    texts = [" ".join(WORDS[:n]) for n in (3, 30, 9, 3, 60)]

    def forward(batch):  # each sequence's real ids, as a column
        return [ids[mask.bool()].float()[:, None] for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]

    for window in (None, 12):
        results = engine.run(texts, forward, max_length=window)
        expected = [e.ids for e in tokenizer.encode(texts, max_length=window or 40)]
        assert [row[:, 0].tolist() for row in results.values] == expected
        assert results.values[0] is not results.values[3] and torch.equal(results.values[0], results.values[3])
    assert engine.max_length == 40


def test_engine_rounds_lengths_to_the_bucket(tokenizer):
    engine = BatchEngine(tokenizer, batch_size=2, bucket=16, max_length=40)
    lengths = []
    engine.run([" ".join(WORDS[:n]) for n in (3, 9, 30, 60)],
               lambda b: lengths.append(b["input_ids"].shape[1]) or torch.zeros(b["input_ids"].shape[0], 1))
    assert lengths and all(n % 16 == 0 or n == 40 for n in lengths)


def test_engine_arguments_are_checked(tokenizer):
    for bad in ({"batch_size": 0}, {"max_tokens": 0}, {"batch_size": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            BatchEngine(tokenizer, **bad)
