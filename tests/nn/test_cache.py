"""Caches of activations (minialign/nn/cache.py): a capture saved and loaded bit for bit, stacked in layer order, cut
to its real tokens, and a dataset streamed to shards of tokens, read back lazily (every token once) to train a probe."""

from __future__ import annotations

import json

import pytest
import torch

import minialign as ma
from minialign import masks
from minialign.nn import cache
from family_builders import random_encoder


def _tiny(num_layers=2, seed=0, **fields):
    config = ma.Config(vocab_size=100, hidden_size=8, num_layers=num_layers, num_heads=2, intermediate_size=16,
                       hidden_dropout=0.0, attention_dropout=0.0, **fields)
    return ma.Encoder(config, seed=seed).eval()


def _padded(lengths=(6, 3), length=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (len(lengths), length), generator=g)
    mask = masks.padding_mask(list(lengths), length)
    return ids, mask.long()


def _capture(model, ids, mask, names=None, dtype=None):
    if dtype is not None:
        model = model.to(dtype)
    with torch.no_grad(), ma.capture(model, names=names) as cap:
        model(ids, attention_mask=mask)
    return cap


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_saved_capture_loads_bit_for_bit(tmp_path, dtype):
    model = _tiny()
    ids, mask = _padded()
    cap = _capture(model, ids, mask, dtype=dtype)
    cache.save(cap, tmp_path / "run.safetensors")
    back = cache.load(tmp_path / "run.safetensors")
    assert list(back) == list(cap)  # the same names, in order
    for name in cap:
        assert back[name].dtype == cap[name].dtype and torch.equal(back[name], cap[name]), name
    assert torch.equal(back.real, mask.bool())
    meta = cache.info(tmp_path / "run.safetensors")
    assert meta["model"] == "Encoder" and meta["detach"] is True and meta["real_only"] == []
    assert meta["shapes"]["layers.0.attention.probs"] == [2, 2, 6, 6]
    assert meta["layouts"]["layers.0.attention.q"] == "head" and meta["layouts"]["layers.0.output"] == "token"


def test_a_capture_with_its_graph_is_saved_detached(tmp_path):
    model = _tiny()
    ids, mask = _padded()
    with ma.capture(model, names=["layers.*.output"], detach=False) as cap:
        model(ids, attention_mask=mask)
    assert cap["layers.1.output"].requires_grad
    cache.save(cap, tmp_path / "grad.safetensors")
    back = cache.load(tmp_path / "grad.safetensors")
    assert not back["layers.1.output"].requires_grad
    assert torch.equal(back["layers.1.output"], cap["layers.1.output"].detach())
    assert cache.info(tmp_path / "grad.safetensors")["detach"] is False


def test_real_only_round_trip_of_two_padded_texts(tmp_path, wordpiece_dir):
    tokenizer = ma.Tokenizer.from_dir(wordpiece_dir)
    batch = tokenizer(["the tower was built in paris and opened", "a short one"])
    lengths = batch["attention_mask"].sum(1).tolist()
    assert lengths[0] > lengths[1]  # the second text is padded
    config = ma.Config(vocab_size=tokenizer.backend.get_vocab_size(), hidden_size=32, num_layers=2, num_heads=4,
                       intermediate_size=48, hidden_dropout=0.0, attention_dropout=0.0)
    model = ma.Encoder(config, seed=0).eval()
    names = ["layers.1.output", "layers.0.attention.context", "layers.0.attention.probs", "pooler.output"]
    with torch.no_grad(), ma.capture(model, names=names) as cap:
        model(**batch)
    rows = cache.real_rows(cap, "layers.1.output")
    assert rows.shape == (sum(lengths), 32)
    assert torch.equal(rows[: lengths[0]], cap["layers.1.output"][0, : lengths[0]])
    assert torch.equal(rows[lengths[0]:], cap["layers.1.output"][1, : lengths[1]])
    heads = cache.real_rows(cap, "layers.0.attention.context")  # (B, H, L, D) -> (T, H, D)
    assert heads.shape == (sum(lengths), 4, 8)
    assert torch.equal(heads[lengths[0] + 1], cap["layers.0.attention.context"][1, :, 1])
    index = cache.token_index(cap, "layers.1.output")
    assert index.tolist() == [[0, p] for p in range(lengths[0])] + [[1, p] for p in range(lengths[1])]
    with pytest.raises(ValueError, match="no token axis"):
        cache.real_rows(cap, "pooler.output")

    cache.save(cap, tmp_path / "real.safetensors", real_only=True)
    meta = cache.info(tmp_path / "real.safetensors")
    assert sorted(meta["real_only"]) == sorted(n for n in names if n != "pooler.output")
    back = cache.load(tmp_path / "real.safetensors")
    for name in names:
        assert back[name].shape == cap[name].shape, name
    for name in names[:3]:  # the real tokens equal bit for bit; the padding rebuilt as zeros
        assert torch.equal(cache.real_rows(back, name), cache.real_rows(cap, name)), name
    assert torch.equal(back["pooler.output"], cap["pooler.output"])  # no token axis: stored whole
    assert (back["layers.1.output"][1, lengths[1]:] == 0).all()
    assert (back["layers.0.attention.probs"][1, :, lengths[1]:] == 0).all()


def test_each_heads_write_is_cut_per_head():
    model = _tiny()
    ids, mask = _padded(lengths=(6, 3))
    cap = _capture(model, ids, mask, names=["layers.1.attention.head_outputs"])
    rows = cache.real_rows(cap, "layers.1.attention.head_outputs")  # (B, H, L, C) -> (T, H, C)
    assert rows.shape == (9, 2, 8)
    assert torch.equal(rows[6:], cap["layers.1.attention.head_outputs"][1, :, :3].transpose(0, 1))


def test_the_nth_forward_reads_its_own_mask():
    model = _tiny()
    ids, mask = _padded(lengths=(6, 3))
    with torch.no_grad(), ma.capture(model, names=["layers.0.output"]) as cap:
        model(ids, attention_mask=mask)
        model(ids, attention_mask=masks.padding_mask([2, 5], 6).long())
    assert cache.real_rows(cap, "layers.0.output").shape[0] == 9
    second = cache.real_rows(cap, "layers.0.output#1")
    assert second.shape[0] == 7
    assert torch.equal(second[:2], cap["layers.0.output#1"][0, :2])


def test_stacked_in_numeric_layer_order():
    model = _tiny(num_layers=12)
    ids, mask = _padded()
    cap = _capture(model, ids, mask, names=["layers.*.output", "layers.*.attention.probs", "embeddings.norm"])
    names = cache.matching(cap, "layers.*.output")
    assert names == [f"layers.{i}.output" for i in range(12)]  # layers.10 after layers.9, not after layers.1
    out = cache.stacked(cap, "layers.*.output")
    assert out.shape == (12, 2, 6, 8)
    for i in range(12):
        assert torch.equal(out[i], cap[f"layers.{i}.output"])
    assert cache.stacked(cap, "layers.*.attention.probs").shape == (12, 2, 2, 6, 6)
    with pytest.raises(ValueError, match="close: layers.0.output"):
        cache.stacked(cap, "layers.0.ouptut")
    with pytest.raises(ValueError, match="different shapes: layers.0.attention.probs"):
        cache.stacked(cap, "layers.**")


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_the_residual_stream_is_each_layers_input_then_the_last_output(arch):
    model = random_encoder(arch, num_layers=3)
    ids, mask = _padded()
    cap = _capture(model, ids, mask, names=["layers.*.input", "layers.*.output"])
    stream = cache.residual_stream(cap)
    assert stream.shape == (4, 2, 6, 32)
    for i in range(3):
        assert torch.equal(stream[i], cap[f"layers.{i}.input"])
        if i:
            assert torch.equal(stream[i], cap[f"layers.{i - 1}.output"])  # what leaves one layer enters the next
    assert torch.equal(stream[3], cap["layers.2.output"])
    only_inputs = _capture(model, ids, mask, names=["layers.*.input"])
    with pytest.raises(ValueError, match="layers.2.output"):
        cache.residual_stream(only_inputs)


def _texts_batches(n=5, seed=0):
    """5 padded batches of 2-3 texts of different lengths."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        size = 2 + i % 2
        length = 4 + i
        lengths = torch.randint(1, length + 1, (size,), generator=g).tolist()
        lengths[0] = length
        out.append({"input_ids": torch.randint(5, 100, (size, length), generator=g),
                    "attention_mask": masks.padding_mask(lengths, length).long()})
    return out


def test_a_streamed_dataset_equals_its_plain_captures(tmp_path):
    model = _tiny()
    batches = _texts_batches()
    names = ["layers.1.output", "layers.0.attention.v"]
    directory = cache.cache_dataset(model, iter(batches), names, tmp_path / "acts", shard_size=7)
    expected = {name: [] for name in names}
    documents = []
    seen = 0
    for batch in batches:
        cap = _capture(model, batch["input_ids"], batch["attention_mask"], names=names)
        for name in names:
            expected[name].append(cache.real_rows(cap, name))
        index = cache.token_index(cap, "layers.1.output")
        documents.append(index + torch.tensor([seen, 0]))
        seen += batch["input_ids"].size(0)
    total = sum(int(b["attention_mask"].sum()) for b in batches)

    acts = cache.Activations(directory)
    assert len(acts) == total and acts.documents == seen and acts.model == "Encoder"
    assert acts.shapes == {"layers.1.output": (8,), "layers.0.attention.v": (2, 4)}
    for name in names:
        assert torch.equal(acts[name], torch.cat(expected[name])), name
    assert torch.equal(acts.tokens(), torch.cat(documents))

    index = json.loads((directory / "index.json").read_text())
    counts = [shard["tokens"] for shard in index["shards"]]
    assert counts == [7] * (total // 7) + ([total % 7] if total % 7 else [])  # exactly shard_size, the rest last
    assert sorted(p.name for p in directory.glob("shard-*")) == [s["file"] for s in index["shards"]]
    first = acts.tokens()[:7]
    assert [shard["documents"] for shard in index["shards"]][0] == [int(first[0, 0]), int(first[-1, 0]) + 1]

    per_shard = [rows for name, rows in acts if name == "layers.1.output"]
    assert [r.size(0) for r in per_shard] == counts

    for seed in (None, 3):
        got = list(acts.iter("layers.1.output", 4, shuffle_seed=seed))
        assert [b.size(0) for b in got[:-1]] == [4] * (len(got) - 1)
        rows = torch.cat(got)
        whole = acts["layers.1.output"]
        # every row once: the same multiset of rows
        assert rows.shape == whole.shape
        assert torch.equal(rows[rows[:, 0].argsort()], whole[whole[:, 0].argsort()])
    assert all(torch.equal(a, b) for a, b in zip(acts.iter("layers.1.output", 4, shuffle_seed=3),
                                                 acts.iter("layers.1.output", 4, shuffle_seed=3)))


def test_streaming_every_token_and_a_dtype(tmp_path):
    model = _tiny()
    batches = _texts_batches(3)
    directory = cache.cache_dataset(model, batches, ["layers.0.output"], tmp_path / "all", real_only=False,
                                    shard_size=1000, dtype=torch.float16)
    acts = cache.Activations(directory)
    assert len(acts) == sum(b["input_ids"].numel() for b in batches)
    assert acts["layers.0.output"].dtype == torch.float16
    assert json.loads((directory / "index.json").read_text())["dtypes"] == {"layers.0.output": "float16"}


def test_bad_input_and_bad_directories(tmp_path):
    model = _tiny()
    batches = _texts_batches(3)
    with pytest.raises(ValueError, match="no token axis"):
        cache.cache_dataset(_tiny_with_pooler(), batches, ["pooler.output"], tmp_path / "p")
    with pytest.raises(ValueError, match="key axis"):  # probs' rows are (H, L): L changes from batch to batch
        cache.cache_dataset(model, batches, ["layers.0.attention.probs"], tmp_path / "probs")
    with pytest.raises(TypeError, match="dicts of model inputs"):
        cache.cache_dataset(model, [["a text"]], ["layers.0.output"], tmp_path / "texts")
    directory = cache.cache_dataset(model, batches, ["layers.0.output"], tmp_path / "a", shard_size=5)
    with pytest.raises(FileExistsError, match="not empty"):
        cache.cache_dataset(model, batches, ["layers.0.output"], directory)

    other = cache.cache_dataset(_tiny(seed=1), batches, ["layers.1.output"], tmp_path / "b", shard_size=5)
    (directory / "shard-00001.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="shard-00001.safetensors"):
        cache.Activations(directory)
    (directory / "shard-00001.safetensors").write_bytes((other / "shard-00001.safetensors").read_bytes())
    with pytest.raises(ValueError, match="shard-00001.safetensors: written by another run"):
        cache.Activations(directory)
    (directory / "shard-00001.safetensors").write_bytes(b"not a file of tensors")
    with pytest.raises(ValueError, match="shard-00001.safetensors: not a safetensors file"):
        cache.Activations(directory)
    with pytest.raises(FileNotFoundError, match="index.json"):
        cache.Activations(tmp_path)
    acts = cache.Activations(other)
    with pytest.raises(KeyError, match="close: layers.1.output"):
        acts["layers.1.outptu"]

    with pytest.raises(ValueError, match="not a file of minialign.capture"):
        cache.load(other / "shard-00000.safetensors")
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        cache.load(tmp_path / "missing.safetensors")


def _tiny_with_pooler():
    return random_encoder("bert")


def test_a_probe_trains_from_the_reader(tmp_path):
    """A linear probe of 'is this token id even?' from layer 1's rows, a few steps: its loss goes down."""
    torch.manual_seed(0)
    model = _tiny()
    batches = _texts_batches(5)
    directory = cache.cache_dataset(model, batches, ["layers.1.output"], tmp_path / "acts", shard_size=16)
    acts = cache.Activations(directory)
    ids = torch.cat([b["input_ids"][b["attention_mask"].bool()] for b in batches])
    tokens = acts.tokens()
    labels = torch.empty(len(acts))
    position = 0
    for batch_number, batch in enumerate(batches):
        real = batch["input_ids"][batch["attention_mask"].bool()]
        labels[position: position + real.numel()] = (real % 2).float()
        position += real.numel()
    assert labels.numel() == ids.numel() == tokens.size(0)
    rows = acts["layers.1.output"]
    probe = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(probe.parameters(), lr=0.5)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    first = loss_fn(probe(rows).squeeze(-1), labels).item()
    for _ in range(20):
        start = 0
        for batch in acts.iter("layers.1.output", 8):
            target = labels[start: start + batch.size(0)]
            start += batch.size(0)
            optimizer.zero_grad()
            loss_fn(probe(batch).squeeze(-1), target).backward()
            optimizer.step()
    assert loss_fn(probe(rows).squeeze(-1), labels).item() < first
