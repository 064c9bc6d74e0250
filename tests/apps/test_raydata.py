"""Ray Data on a local Ray runtime (2 CPUs, this machine only): the map_batches classes and the
sharded `--ray` commands give what the single-process paths give, row for row; a rerun skips written
shards; an actor killed mid-run loses no row and duplicates none."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")
pa_parquet = pytest.importorskip("pyarrow.parquet")

import minialign as ma  # noqa: E402
from minialign.apps.files.formats import InputError  # noqa: E402
from minialign.apps.cli import main  # noqa: E402
from minialign.apps.raydata import (AlignScoreBatches, ClassifyBatches, EmbedBatches, M3Batches,  # noqa: E402
                                    MiniCheckBatches, MultiVectorBatches, SparseBatches, run_sharded,
                                    shard_of)
from conftest import save_classifier, save_tagger  # noqa: E402
from conftest import CORPUS  # noqa: E402
from family_builders import family_params  # noqa: E402

pytestmark = pytest.mark.slow

TEXTS = [("word " * (1 + (i * 7) % 30)) + f"number {i}" for i in range(40)]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test's own mapper goes by value
    yield
    ray.shutdown()


def test_each_product_has_its_class_under_the_name_the_table_gives():
    """A class statement per product of the table, named by its entry's `ray` (the name Ray Data users import and
    pass to map_batches), for that product; batches_class finds it."""
    from minialign.apps import raydata
    from minialign.apps.products import PRODUCTS

    assert sorted(cls.product for cls in raydata.CLASSES) == sorted(PRODUCTS)
    for entry in PRODUCTS.values():
        mapper = getattr(raydata, entry.ray)
        assert (mapper.product, mapper.__name__, mapper.__module__) == (entry.name, entry.ray, raydata.__name__)
        assert raydata.batches_class(entry.name) is mapper


def _rows(directory: Path) -> list[dict]:
    return [row for f in sorted(directory.rglob("*.parquet")) for row in pa_parquet.read_table(f).to_pylist()]


def _write_texts(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    return path


def test_cli_embed_on_ray_equals_one_process_and_resumes_by_shard(tmp_path, minilm_dir, local_ray, capsys):
    rows, out = _write_texts(tmp_path / "texts.jsonl"), tmp_path / "embedded"
    command = ["embed", "--ray", "--model", str(minilm_dir), "--input", str(rows), "--output", str(out),
               "--shards", "3", "--batch-rows", "8"]
    assert main(command) == 0
    expected = ma.SentenceEncoder.from_pretrained(minilm_dir).encode(TEXTS)
    got = {row["id"]: row for row in _rows(out)}
    assert sorted(got) == sorted(f"t{i}" for i in range(len(TEXTS)))  # every id once
    assert len(_rows(out)) == len(TEXTS)
    for i, text in enumerate(TEXTS):
        assert got[f"t{i}"]["text"] == text
        torch.testing.assert_close(torch.tensor(got[f"t{i}"]["embedding"]), expected[i], atol=1e-5, rtol=0)
    shards = sorted(p.name for p in out.iterdir() if p.name.startswith("shard-"))
    assert shards == [f"shard-{k:05d}-of-00003" for k in range(3)]
    for k in range(3):  # each shard holds exactly its ids
        assert all(shard_of(r["id"], 3) == k for r in _rows(out / shards[k]))

    capsys.readouterr()
    assert main(command) == 0  # a rerun: nothing left to do
    err = capsys.readouterr().err
    assert "embedded 0 shard(s)" in err and "3 already there" in err
    shutil.rmtree(out / shards[1])  # as if the run had stopped before the last shard
    assert main(command) == 0
    assert sorted(r["id"] for r in _rows(out)) == sorted(got)

    capsys.readouterr()
    assert main(command[:-4] + ["--shards", "4", "--batch-rows", "8"]) != 0
    err = capsys.readouterr().err
    assert f"refusing to resume {out}: it was made with other settings (shards: 3 then, 4 now)" in err


def test_map_batches_classify_pandas_and_numpy_batches(tmp_path, minilm_dir, local_ray):
    model_dir = tmp_path / "clf"
    save_classifier(model_dir, "bert", 3, minilm_dir)
    texts = TEXTS[:12]
    pairs = [None if i % 3 == 0 else f"pair text {i}" for i in range(12)]
    records = [{"id": i, "text": t, **({} if p is None else {"pair": p})} for i, (t, p) in enumerate(zip(texts, pairs))]
    clf = ma.Classifier.from_pretrained(model_dir)
    for batch_format in ("pandas", "numpy"):
        ds = ray.data.from_items(records).map_batches(ClassifyBatches, fn_constructor_kwargs={"model": str(model_dir)},
                                                      concurrency=1, batch_size=5, batch_format=batch_format)
        out = sorted(ds.take_all(), key=lambda r: r["id"])
        assert [r["id"] for r in out] == list(range(12))
        for r, text, pair in zip(out, texts, pairs):
            scores = clf.predict([text], None if pair is None else [pair])[0]
            assert r["label"] == clf.labels[int(scores.argmax())]
            got = torch.tensor([r[f"score_{label}"] for label in clf.labels], dtype=torch.float32)
            torch.testing.assert_close(got, scores, atol=1e-5, rtol=0)


def test_map_batches_alignscore_and_minicheck_equal_their_scorers(tmp_path, tiny_alignscore, minilm_dir, local_ray):
    path, backbone, _ = tiny_alignscore
    records = [{"id": i, "context": c, "claim": q} for i, (c, q) in enumerate(CORPUS)]
    contexts, claims = [r["context"] for r in records], [r["claim"] for r in records]
    minicheck_dir = tmp_path / "minicheck"
    save_classifier(minicheck_dir, "bert", 2, minilm_dir)
    runs = [(AlignScoreBatches, {"model": str(path), "backbone": str(backbone)},
             ma.AlignScorer.from_pretrained(path, backbone=str(backbone))),
            (MiniCheckBatches, {"model": str(minicheck_dir)}, ma.MiniCheckScorer.from_pretrained(minicheck_dir))]
    for mapper, options, scorer in runs:
        out = ray.data.from_items(records).map_batches(mapper, fn_constructor_kwargs=options, concurrency=1,
                                                       batch_size=3).take_all()
        got = {r["id"]: r["score"] for r in out}
        expected = scorer.score(contexts, claims, warn_truncation=False)
        assert sorted(got) == list(range(len(records)))
        assert max(abs(got[i] - e) for i, e in enumerate(expected)) <= 1e-6


def test_malformed_rows_are_named_by_id(minilm_dir, local_ray):
    ds = ray.data.from_items([{"id": "a", "text": "fine"}, {"id": "b", "text": ""}, {"id": "c", "text": 5}])
    with pytest.raises(Exception, match=r"row id='c': field 'text' is int, not a string"):
        ds.map_batches(EmbedBatches, fn_constructor_kwargs={"model": str(minilm_dir)}, concurrency=1).take_all()


class DyingEmbed(EmbedBatches):
    """Exits its actor's process the first time it sees row t7 (a marker file records that it did)."""

    def __init__(self, marker: str, **options):
        super().__init__(**options)
        self.marker = Path(marker)

    def __call__(self, batch):
        if "t7" in list(batch["id"]) and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


def test_an_actor_killed_mid_run_loses_no_row_and_duplicates_none(tmp_path, minilm_dir, local_ray):
    rows, out, marker = _write_texts(tmp_path / "texts.jsonl"), tmp_path / "out", tmp_path / "died"
    counts = run_sharded(DyingEmbed, {"marker": str(marker), "model": str(minilm_dir)}, input=rows, output=out,
                         shards=1, batch_rows=4, echo=lambda line: None)
    assert counts == {"written": 1, "skipped": 0}
    assert marker.exists()  # an actor did die holding t7's batch
    ids = [r["id"] for r in _rows(out)]
    assert sorted(ids) == sorted(f"t{i}" for i in range(len(TEXTS)))  # none lost, none twice


def test_a_sharded_run_needs_ids_and_a_known_format(tmp_path, minilm_dir, local_ray):
    no_ids = tmp_path / "no_ids.jsonl"
    no_ids.write_text(json.dumps({"text": "a"}) + "\n")
    with pytest.raises(InputError, match="no column 'id'"):
        run_sharded(EmbedBatches, {"model": str(minilm_dir)}, input=no_ids, output=tmp_path / "o1")
    odd = tmp_path / "rows.txt"
    odd.write_text("x\n")
    with pytest.raises(InputError, match="unknown format '.txt'"):
        run_sharded(EmbedBatches, {"model": str(minilm_dir)}, input=odd, output=tmp_path / "o2")


def test_shards_are_chosen_from_the_rows(tmp_path):
    import pyarrow

    from minialign.apps.raydata import MAX_SHARDS, SHARD_ROWS, choose_shards, count_rows

    assert [choose_shards(n) for n in (0, 1, SHARD_ROWS, SHARD_ROWS + 1, 10**9)] == [1, 1, 1, 2, MAX_SHARDS]
    (tmp_path / "rows.jsonl").write_text('{"id": 1}\n{"id": 2}\n{"id": 3}')  # the last line without its newline
    (tmp_path / "rows.csv").write_text("id,text\n1,a\n2,b\n")
    pa_parquet.write_table(pyarrow.table({"id": list(range(7))}), tmp_path / "rows.parquet")
    assert [count_rows(tmp_path / f"rows.{kind}") for kind in ("jsonl", "csv", "parquet")] == [3, 2, 7]


def test_cli_default_shards_are_said_recorded_and_kept(tmp_path, minilm_dir, local_ray, capsys, monkeypatch):
    """No --shards: 40 rows make one shard, said in one line and recorded; a rerun keeps the count even
    when a fresh choice would differ. No warning comes from minialign's calls into Ray (Ray's DataContext
    warns about its own deprecated fields as it copies itself: not ours)."""
    from minialign.apps import raydata

    rows, out = _write_texts(tmp_path / "texts.jsonl"), tmp_path / "out"
    command = ["embed", "--ray", "--model", str(minilm_dir), "--input", str(rows), "--output", str(out),
               "--batch-rows", "8"]
    logged = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = logged.append
    logging.getLogger("ray.data").addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main(command) == 0
    finally:
        logging.getLogger("ray.data").removeHandler(handler)
    package = str(Path(raydata.__file__).parent)
    ours = [f"{w.filename}: {w.message}" for w in caught if w.filename.startswith(package)
            or "Use 'expr' instead of 'fn'" in str(w.message)]  # our filter by a hash cannot be an expression
    ours += [r.getMessage() for r in logged if "deprecated" in r.getMessage() and "concurrency" in r.getMessage()]
    assert ours == []
    err = capsys.readouterr().err
    assert f"{len(TEXTS)} row(s): 1 shard(s), one per 10,000 rows (at most 16)" in err
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("shard-")) == ["shard-00000-of-00001"]
    assert json.loads((out / "_minialign.json").read_text())["settings"]["shards"] == 1
    assert sorted(r["id"] for r in _rows(out)) == sorted(f"t{i}" for i in range(len(TEXTS)))
    monkeypatch.setattr(raydata, "SHARD_ROWS", 10)  # a fresh choice would now be 4 shards
    assert main(command) == 0
    err = capsys.readouterr().err
    assert f"1 shard(s), as {out / '_minialign.json'} records" in err and "1 already there" in err


@pytest.mark.parametrize("family", family_params(["camembert"]))
def test_cli_classify_on_ray_on_another_family_equals_one_process(family, tiny_family, tmp_path, local_ray):
    """`classify --ray` on CamemBERT (a SentencePiece tokenizer, `<s> A </s></s> B </s>` pairs, no pooler in
    the head) writes what Classifier.predict gives, every id once (tests/family_builders.py)."""
    classifier, _ = tiny_family.classifier(family, 3)
    texts = TEXTS[:12]
    rows = tmp_path / "pairs.jsonl"
    rows.write_text("".join(json.dumps({"id": f"t{i}", "text": t, "pair": "A tower."}) + "\n"
                            for i, t in enumerate(texts)))
    clf = ma.Classifier.from_pretrained(classifier)
    probs = clf.predict(texts, ["A tower."] * len(texts), warn_truncation=False)
    assert main(["classify", "--ray", "--model", str(classifier), "--input", str(rows), "--pair-field", "pair",
                 "--output", str(tmp_path / "out"), "--shards", "1", "--batch-rows", "4"]) == 0
    got = {row["id"]: row for row in _rows(tmp_path / "out")}
    assert sorted(got) == sorted(f"t{i}" for i in range(len(texts))) and len(_rows(tmp_path / "out")) == len(texts)
    scores = torch.tensor([[got[f"t{i}"][f"score_{label}"] for label in clf.labels] for i in range(len(texts))])
    torch.testing.assert_close(scores, probs, atol=1e-5, rtol=0)
    assert all(got[f"t{i}"]["label"] == clf.labels[int(probs[i].argmax())] for i in range(len(texts)))


@pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")
def test_map_batches_of_the_retrieval_products_give_their_ragged_records(retrieval_dirs, local_ray, tmp_path):
    """SparseBatches, MultiVectorBatches, M3Batches: ragged columns (sparse indices and values, token vectors) as
    variable-shaped tensor columns, BGE-M3's lexical weights as their JSON text; each row's values equal the product's
    own call (torch.equal), in numpy and pandas batches, and written to parquet by `embed --method sparse --ray`."""
    texts = TEXTS[:7]
    records = [{"id": i, "text": t} for i, t in enumerate(texts)]
    sparse = ma.SparseEncoder.from_pretrained(retrieval_dirs["sparse"]).encode(texts, convert_to_sparse_tensor=False)
    vectors = ma.MultiVectorEncoder.from_pretrained(retrieval_dirs["multivector"]).encode_query(texts)
    m3 = ma.M3Encoder.from_pretrained(retrieval_dirs["m3"]).encode(texts, return_sparse=True, return_colbert_vecs=True)
    runs = [(SparseBatches, {"model": str(retrieval_dirs["sparse"])}),
            (MultiVectorBatches, {"model": str(retrieval_dirs["multivector"]), "task": "query"}),
            (M3Batches, {"model": str(retrieval_dirs["m3"]), "return_sparse": True, "return_colbert_vecs": True})]
    for batch_format, mapper, options in [("numpy", *run) for run in runs] + [("pandas", *runs[2])]:  # its dicts
        out = ray.data.from_items(records).map_batches(mapper, fn_constructor_kwargs=options, concurrency=1,
                                                       batch_size=3, batch_format=batch_format).take_all()
        for r in sorted(out, key=lambda r: r["id"]):
            i = r["id"]
            if mapper is SparseBatches:
                assert [int(x) for x in r["indices"]] == sparse[i].nonzero().flatten().tolist()
                assert torch.equal(torch.as_tensor(r["values"], dtype=torch.float32), sparse[i][sparse[i] != 0])
            elif mapper is MultiVectorBatches:
                assert torch.equal(torch.as_tensor(list(r["vectors"])).reshape(vectors[i].shape), vectors[i])
            else:
                assert torch.equal(torch.as_tensor(r["dense_vecs"]), m3["dense_vecs"][i])
                lexical = r["lexical_weights"]
                assert isinstance(lexical, str) and json.loads(lexical) == m3["lexical_weights"][i]
                colbert = torch.as_tensor(list(r["colbert_vecs"]))
                assert torch.equal(colbert.reshape(m3["colbert_vecs"][i].shape), m3["colbert_vecs"][i])
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["embed", "--method", "sparse", "--ray", "--model", str(retrieval_dirs["sparse"]), "--input", str(rows),
                 "--output", str(tmp_path / "out"), "--shards", "2"]) == 0
    written = {r["id"]: r for r in _rows(tmp_path / "out")}
    assert sorted(written) == list(range(len(texts)))
    for i, r in written.items():
        assert [int(x) for x in r["indices"]] == sparse[i].nonzero().flatten().tolist()


def test_ner_on_ray_writes_each_rows_entities_as_a_list_of_structs(tmp_path, wordpiece_dir, local_ray):
    """`ner --ray` to parquet: each row's entities a list of structs (empty lists too), equal to TokenClassifier.predict's,
    every id once (NERBatches on numpy and pandas batches: tests/apps/test_ner.py, without a Ray runtime)."""
    tagger = save_tagger(tmp_path / "tagger", wordpiece_dir)
    texts = ["Angela Merkel visited Zürich.", "", "Emoji 😀 and words"] + TEXTS[:9]
    expected = ma.TokenClassifier.from_pretrained(tagger).predict(texts, aggregation_strategy="simple", stride=4)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    assert main(["ner", "--ray", "--model", str(tagger), "--input", str(rows), "--output", str(tmp_path / "out"),
                 "--aggregation-strategy", "simple", "--stride", "4", "--shards", "2", "--batch-rows", "3"]) == 0
    written = {r["id"]: r for r in _rows(tmp_path / "out")}
    assert sorted(written) == sorted(f"t{i}" for i in range(len(texts))) and len(_rows(tmp_path / "out")) == len(texts)
    assert [written[f"t{i}"]["entities"] for i in range(len(texts))] == expected
    assert written["t1"]["entities"] == [] and any(written[f"t{i}"]["entities"] for i in range(len(texts)))


def test_fill_mask_on_ray_writes_a_list_of_candidates_per_mask(tmp_path, wordpiece_dir, local_ray):
    """`fill-mask --ray` to parquet: each row's candidates a list per mask (Arrow's list of lists of structs, one mask
    or two), equal to FillMask.predict's, every id once (FillMaskBatches on numpy and pandas batches:
    tests/apps/test_fill_mask_faces.py, without a Ray runtime)."""
    from conftest import save_filler

    filler = save_filler(tmp_path / "filler", wordpiece_dir)
    texts = ["Paris is the [MASK] of France.", "The [MASK] and the [MASK] went to Zürich.", "Emoji 😀 [MASK] words"] * 3
    results = ma.FillMask.from_pretrained(filler).predict(texts, top_k=2, targets=["paris", "the", "of"])
    expected = [r if isinstance(r[0], list) else [r] for r in results]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    assert main(["fill-mask", "--ray", "--model", str(filler), "--input", str(rows), "--output", str(tmp_path / "out"),
                 "--top-k", "2", "--targets", "paris,the,of", "--shards", "2", "--batch-rows", "2"]) == 0
    written = {r["id"]: r for r in _rows(tmp_path / "out")}
    assert sorted(written) == sorted(f"t{i}" for i in range(len(texts))) and len(_rows(tmp_path / "out")) == len(texts)
    assert [written[f"t{i}"]["candidates"] for i in range(len(texts))] == expected
