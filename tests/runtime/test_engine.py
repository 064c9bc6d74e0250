"""The batching engine's host work (runtime/engine.py): tokenizing in chunks at once, collating ahead of the device,
each batch's HostBatch and vocabulary check, the outputs gathered with one copy to the host, the device's batch
budget, and the rows a batch is padded to under CUDA graphs. Everything here runs on the CPU, where `overlap` (the
accelerator's path: a collating thread, outputs held until the end) is switched on by hand to run the same code."""

import threading

import pytest
import torch
from conftest import WORDS

from minialign.models.encoder import check_input_ids
from minialign.nn.layout import HostBatch
from minialign.runtime import engine as engines
from minialign.runtime.engine import BatchEngine, graph_rows
from minialign.text.tokenizer import Tokenizer, pad


@pytest.fixture(scope="module")
def tokenizer(wordpiece_dir):
    return Tokenizer.from_pretrained(wordpiece_dir)


def text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + (i * 13) % 37))


TEXTS = [text(i) for i in range(150)]
PAIRS = [(text(i // 5) * (1 + i % 3), text(1000 + i)) for i in range(150)]  # contexts shared by 5 claims, some cut


def table(vocab: int = 30522, width: int = 6) -> torch.Tensor:
    return torch.randn(vocab, width, generator=torch.Generator().manual_seed(0))


def pooled(batch, weights):
    """A forward whose row depends on its own sequence alone: the masked sum of an embedding table's rows."""
    vectors = weights[batch["input_ids"]] * batch["attention_mask"][..., None]
    return vectors.sum(1) + batch.get("token_type_ids", torch.zeros(1, 1)).sum(1, keepdim=True)


# -- tokenizing -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("inputs", [TEXTS, PAIRS], ids=["texts", "pairs"])
def test_chunks_tokenized_at_once_give_the_ids_of_one_call(tokenizer, inputs, monkeypatch):
    """Many inputs are tokenized in chunks, each thread with its own tokenizer copy; ids, types, cuts and order
    are those of one encode_ids call."""
    monkeypatch.setattr(engines, "TOKENIZE_CHUNK", 20)
    engine = BatchEngine(tokenizer, max_length=24, threads=4)
    calls = []
    encode_ids = Tokenizer.encode_ids
    monkeypatch.setattr(Tokenizer, "encode_ids", lambda self, *a, **k: calls.append(self) or encode_ids(self, *a, **k))
    got = engine.tokenize(inputs)
    assert len(calls) == 4 and len({id(t.backend) for t in calls}) == 4  # four chunks, four backends
    if isinstance(inputs[0], tuple):
        one = encode_ids(tokenizer, [a for a, _ in inputs], [b for _, b in inputs], max_length=24)
    else:
        one = encode_ids(tokenizer, inputs, max_length=24)
    assert got.ids == one.ids and got.type_ids == one.type_ids and got.truncated == one.truncated
    assert any(got.truncated)  # the window cut some: the cut is counted per chunk as in one call
    calls.clear()
    engine.tokenize(inputs[:30])  # too few for two chunks: one call
    assert len(calls) == 1 and calls[0] is tokenizer


# -- what a batch carries ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("packed", [True, False])
def test_each_batch_is_the_padded_batch_of_before_with_its_host_batch(tokenizer, packed):
    """Each batch holds the padded tensors the engine built before (sorted longest first, padded to its own longest),
    on the host with its HostBatch (each row's length, the ids' range); the results are the forward's rows, placed by
    input, bit for bit."""
    engine = BatchEngine(tokenizer, batch_size=7, max_tokens=120, packed=packed)
    weights, seen = table(), []

    def forward(batch):
        seen.append(batch)
        return pooled(batch, weights)

    inputs = TEXTS[:40] + TEXTS[:5]
    results = engine.run(inputs, forward)
    encoded = tokenizer.encode_ids(TEXTS[:40], max_length=engine.max_length)
    order = sorted(range(40), key=lambda i: len(encoded.ids[i]), reverse=True)
    start = 0
    for batch in seen:
        rows = order[start:start + batch["input_ids"].size(0)]
        start += len(rows)
        built = pad([encoded.ids[i] for i in rows], [encoded.type_ids[i] for i in rows], pad_id=tokenizer.pad_token_id)
        assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "host"}
        for name, tensor in built.items():
            assert torch.equal(batch[name], tensor), name
        host = batch["host"]
        assert isinstance(host, HostBatch) and host.lengths == tuple(len(encoded.ids[i]) for i in rows)
        assert host.ids_range == (int(built["input_ids"].min()), int(built["input_ids"].max()))
        assert torch.equal(results.values[rows], pooled(batch, weights))
    assert start == 40
    assert torch.equal(results.values[40:], results.values[:5])


GOOD, BAD = ["the a the a the a the", "the a the a the a"], "zygote"


def vocabulary(tokenizer) -> int:
    """A vocabulary size that holds GOOD's ids but not BAD's."""
    size = max(max(ids) for ids in tokenizer.encode_ids(GOOD).ids) + 1
    assert max(tokenizer.encode_ids([BAD]).ids[0]) >= size
    return size


def test_the_vocabulary_is_checked_on_the_host_before_the_forward(tokenizer):
    """An engine that knows the model's vocabulary (for_model: its config's vocab_size) refuses a batch with an id
    outside it, in the Encoder's words, before anything runs."""
    size = vocabulary(tokenizer)
    model = torch.nn.Linear(2, 2)
    model.config = type("Config", (), {"vocab_size": size, "max_seq_len": 512})()
    engine = BatchEngine.for_model(tokenizer, model)
    assert engine.vocab_size == size
    calls = []
    with pytest.raises(ValueError) as refused:
        engine.run([BAD], lambda batch: calls.append(batch) or torch.zeros(1, 1))
    assert not calls
    with pytest.raises(ValueError) as by_the_encoder:
        check_input_ids(torch.tensor(tokenizer.encode_ids([BAD]).ids), model.config)
    assert str(refused.value) == str(by_the_encoder.value)
    assert f"outside the vocabulary [0, {size})" in str(refused.value)
    assert engine.run(GOOD, lambda batch: torch.zeros(len(batch["input_ids"]), 1)).values.shape == (2, 1)


# -- working ahead of the device, gathering at the end -----------------------------------------------------------------

def held(engine: BatchEngine) -> BatchEngine:
    engine.overlap = True  # an accelerator's path, on the CPU: the same code, the device being the CPU
    return engine


@pytest.mark.parametrize("packed", [True, False])
def test_working_ahead_gives_the_same_results_with_one_copy_to_the_host(tokenizer, packed, monkeypatch):
    """With overlap (collation in a background thread, outputs held where the forward made them) the results are
    the same bits as batch by batch, and the outputs reach the host in one copy at the end of the run."""
    weights = table()
    forward = lambda batch: pooled(batch, weights).half()  # noqa: E731 - converted to float32 only on the host
    plain = BatchEngine(tokenizer, batch_size=4, packed=packed).run(PAIRS, forward)
    copies = []
    to_host = engines._to_host
    monkeypatch.setattr(engines, "_to_host", lambda t: copies.append(t.shape) or to_host(t))
    ahead = held(BatchEngine(tokenizer, batch_size=4, packed=packed)).run(PAIRS, forward)
    assert copies == [(len(set(PAIRS)), 6)]  # every batch's output, in one copy
    assert ahead.values.dtype == torch.float32 and torch.equal(ahead.values, plain.values)
    assert torch.equal(ahead.truncated, plain.truncated)
    copies.clear()
    monkeypatch.setattr(engines, "HELD_BYTES", 100)  # outputs past the bound are copied as they pass it
    again = held(BatchEngine(tokenizer, batch_size=4, packed=packed)).run(PAIRS, forward)
    assert len(copies) > 1 and torch.equal(again.values, plain.values)


def test_a_ragged_forward_s_entries_reach_the_host_in_one_copy_per_dtype(tokenizer, monkeypatch):
    weights = table()

    def forward(batch):  # each sequence's real ids (int64) and their vectors (float16)
        rows = zip(batch["input_ids"], batch["attention_mask"].bool())
        return [{"ids": ids[keep], "vectors": weights[ids[keep]].half()} for ids, keep in rows]

    plain = BatchEngine(tokenizer, batch_size=3).run(TEXTS[:30] + TEXTS[:2], forward)
    copies = []
    to_host = engines._to_host
    monkeypatch.setattr(engines, "_to_host", lambda t: copies.append(t.dtype) or to_host(t))
    ahead = held(BatchEngine(tokenizer, batch_size=3)).run(TEXTS[:30] + TEXTS[:2], forward)
    assert sorted(map(str, copies)) == ["torch.float16", "torch.int64"]
    assert len(ahead.values) == 32
    for a, b in zip(ahead.values, plain.values):
        assert a["vectors"].dtype == torch.float32 and a["ids"].dtype == torch.int64
        assert torch.equal(a["vectors"], b["vectors"]) and torch.equal(a["ids"], b["ids"])
    assert ahead.values[30]["ids"] is not ahead.values[0]["ids"]  # a repeated input's own copy


def test_an_error_while_collating_ahead_reaches_the_caller_and_stops_the_thread(tokenizer):
    engine = held(BatchEngine(tokenizer, batch_size=1, vocab_size=vocabulary(tokenizer)))
    ran = []
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.run([*GOOD, BAD], lambda b: ran.append(1) or torch.zeros(1, 1))
    assert len(ran) == 2  # the batches before it ran (longest first: the bad one is last)
    assert not [t for t in threading.enumerate() if t.name == "minialign-ahead"]


# -- the device's budget -----------------------------------------------------------------------------------------------

def test_on_an_accelerator_the_token_budget_alone_bounds_a_batch(tokenizer):
    on_cpu = BatchEngine(tokenizer)
    assert on_cpu.batch_size == engines.CPU_BATCH_SIZE == 32 and not on_cpu.overlap
    model = torch.nn.Linear(2, 2, device="meta")
    model.config = type("Config", (), {"vocab_size": 1000})()
    on_device = BatchEngine.for_model(tokenizer, model)
    assert on_device.overlap and on_device.max_tokens == engines.DEVICE_BATCH_TOKENS
    assert on_device.batch_size == on_device.max_tokens
    on_device.set_budget(max_tokens=5000)
    assert on_device.batch_size == 5000  # follows the budget
    on_device.set_budget(batch_size=64)
    assert on_device.batch_size == 64  # unless set
    assert BatchEngine.for_model(tokenizer, model, batch_size=8).batch_size == 8
    for bad in (0, True):
        with pytest.raises(ValueError, match="batch_size"):
            BatchEngine(tokenizer, device="meta", batch_size=bad)


# -- CUDA graphs: rows rounded up to a power of two --------------------------------------------------------------------

def test_graph_rows_are_powers_of_two():
    assert [graph_rows(n) for n in (1, 2, 3, 4, 5, 8, 9, 33)] == [1, 2, 4, 4, 8, 8, 16, 64]


@pytest.mark.parametrize("overlap", [False, True])
def test_under_cuda_graphs_rows_are_padded_and_their_results_dropped(tokenizer, overlap):
    """cuda_graphs: each batch runs as a power of two of rows, the extra ones a single pad token each (their
    HostBatch lengths 1); their results are dropped, every real row's result is the one it has without them; the
    token budget counts the rows a batch runs as."""
    weights = table()
    inputs = TEXTS[:45]
    plain = BatchEngine(tokenizer, batch_size=7, bucket=16, packed=False).run(inputs, lambda b: pooled(b, weights))
    engine = BatchEngine(tokenizer, batch_size=7, bucket=16, packed=False, cuda_graphs=True)
    engine.overlap = overlap
    seen = []

    def forward(batch):
        seen.append(batch)
        return pooled(batch, weights)

    padded = engine.run(inputs, forward)
    assert torch.equal(padded.values, plain.values)
    assert sum(len(b["host"].lengths) for b in seen) > len(inputs)  # some batches were padded
    for batch in seen:
        rows, length = batch["input_ids"].shape
        assert rows in (1, 2, 4, 8) and length % 16 == 0
        real = batch["host"].lengths
        extra = [i for i, n in enumerate(real) if n == 1]
        assert extra == list(range(rows - len(extra), rows))  # at the end
        assert all(batch["input_ids"][i, 0] == tokenizer.pad_token_id for i in extra)
        assert batch["attention_mask"].sum(1).tolist() == list(real)
    ragged = engine.run(inputs, lambda b: list(pooled(b, weights)))
    assert len(ragged.values) == len(inputs)
    assert all(torch.equal(a, b) for a, b in zip(ragged.values, plain.values))
    budget = BatchEngine(tokenizer, max_tokens=10 * 3, packed=False, cuda_graphs=True)
    sizes = [len(b) for b in budget.batches(list(range(9)), [10] * 9, 32)]
    assert sizes == [2, 2, 2, 2, 1]  # 3 rows would run as 4: 40 tokens, over the budget


def test_a_runner_working_ahead_gives_the_same_bits(minilm_dir):
    """A real model through the accelerator's path (collation ahead, outputs held, one copy at the end): the
    embeddings of the batch-by-batch path, bit for bit."""
    import minialign as ma

    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, batch_size=3)
    texts = TEXTS[:20]
    plain = encoder.encode(texts)
    held(encoder.engine)
    assert torch.equal(encoder.encode(texts), plain)


def test_per_row_values_reach_each_batch_in_its_rows_order(tokenizer):
    """run_encoded's per_row: one int per sequence joins each batch as a (B,) tensor in the batch's own row order
    (the engine sorts by length), so a forward reads each row's own value (HallucinationDetector's answer starts)."""
    engine = BatchEngine(tokenizer, batch_size=4)
    encoded = engine.tokenize(TEXTS[:11])
    seen = []

    def forward(batch):
        seen.append(batch["tag"].tolist())
        return batch["tag"][:, None].float() * 1000 + batch["attention_mask"].sum(1, keepdim=True)

    out = engine.run_encoded(encoded, forward, per_row={"tag": list(range(11))}).values
    assert len(seen) == 3 and sorted(sum(seen, [])) == list(range(11))
    assert out[:, 0].tolist() == [i * 1000 + len(ids) for i, ids in enumerate(encoded.ids)]
