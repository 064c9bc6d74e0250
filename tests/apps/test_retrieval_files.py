"""`minialign embed --method sparse | multivector | m3` on files: each row's record equals the product's
own Python call (torch.equal: the same forwards), in .jsonl and in .safetensors (the sparse, ragged and BGE-M3
layouts read back), --resume, --workers 2, the options of another method refused."""

import json

import pytest
import torch
from safetensors import safe_open

import minialign as ma
from minialign.apps.cli import main

TEXTS = ["The Eiffel Tower is in Paris.", "", "word " * 60, "Unicode: café 東京 😀", "a b c", "The Eiffel Tower is in Paris."]

pytestmark = pytest.mark.filterwarnings("ignore::minialign.runtime.engine.TruncationWarning")


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    return path


def run(method, model, rows, out, *extra):
    return main(["embed", "--method", method, "--model", str(model), "--input", str(rows), "--output", str(out),
                 "--batch-size", "2", *extra])


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def tensors(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def test_sparse_rows_equal_encode_and_the_safetensors_layout(retrieval_dirs, rows, tmp_path):
    encoder = ma.SparseEncoder.from_pretrained(retrieval_dirs["sparse"])
    expected = encoder.encode_document(TEXTS, convert_to_sparse_tensor=False)  # (N, V), the "d: " prompt
    assert run("sparse", retrieval_dirs["sparse"], rows, tmp_path / "out.jsonl", "--task", "document") == 0
    got = read_jsonl(tmp_path / "out.jsonl")
    assert [r["id"] for r in got] == [f"r{i}" for i in range(len(TEXTS))]
    for record, row in zip(got, expected):
        assert record["indices"] == sorted(record["indices"]) and 0 not in record["values"]
        dense = torch.zeros(encoder.dimension)
        dense[record["indices"]] = torch.tensor(record["values"])
        assert torch.equal(dense, row)
    assert run("sparse", retrieval_dirs["sparse"], rows, tmp_path / "out.safetensors", "--task", "document") == 0
    named, metadata = tensors(tmp_path / "out.safetensors")
    assert set(named) == {"indices", "values", "offsets"} and named["indices"].dtype == torch.int64
    assert int(metadata["vocab_size"]) == encoder.dimension and json.loads(metadata["ids"])[0] == "r0"
    offsets = named["offsets"].tolist()
    assert len(offsets) == len(TEXTS) + 1 and offsets[-1] == len(named["values"])
    for i, row in enumerate(expected):
        dense = torch.zeros(encoder.dimension)
        dense[named["indices"][offsets[i]:offsets[i + 1]]] = named["values"][offsets[i]:offsets[i + 1]]
        assert torch.equal(dense, row)
    # no task: encode's (no prompt: the model has no default one), another file
    assert run("sparse", retrieval_dirs["sparse"], rows, tmp_path / "plain.jsonl", "--max-active-dims", "3") == 0
    plain = encoder.encode(TEXTS, max_active_dims=3, convert_to_sparse_tensor=False)
    for record, row in zip(read_jsonl(tmp_path / "plain.jsonl"), plain):
        assert record["indices"] == row.nonzero().flatten().tolist() and len(record["indices"]) <= 3
        assert torch.equal(torch.tensor(record["values"]), row[row != 0])


def test_sparse_resume_continues_and_refuses_other_settings(retrieval_dirs, rows, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert run("sparse", retrieval_dirs["sparse"], rows, out, "--task", "query") == 0
    whole = out.read_text()
    out.write_text("".join(whole.splitlines(keepends=True)[:2]) + whole.splitlines(keepends=True)[2][:10])
    assert run("sparse", retrieval_dirs["sparse"], rows, out, "--task", "query", "--resume") == 0
    assert out.read_text() == whole
    out.write_text("".join(whole.splitlines(keepends=True)[:2]))
    capsys.readouterr()
    assert run("sparse", retrieval_dirs["sparse"], rows, out, "--task", "document", "--resume") == 2
    assert "task: 'query' then, 'document' now" in capsys.readouterr().err


def test_multivector_rows_equal_encode_query_workers_and_layout(retrieval_dirs, rows, tmp_path):
    encoder = ma.MultiVectorEncoder.from_pretrained(retrieval_dirs["multivector"])
    expected = encoder.encode_query(TEXTS)
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}.jsonl"
        assert run("multivector", retrieval_dirs["multivector"], rows, out, "--task", "query",
                   "--workers", workers) == 0
        for record, vectors in zip(read_jsonl(out), expected):
            assert torch.equal(torch.tensor(record["vectors"]).reshape(-1, encoder.dimension), vectors)
    assert run("multivector", retrieval_dirs["multivector"], rows, tmp_path / "out.safetensors", "--task",
               "query") == 0
    named, _ = tensors(tmp_path / "out.safetensors")
    assert set(named) == {"vectors", "offsets"}
    offsets = named["offsets"].tolist()
    for i, vectors in enumerate(expected):
        assert torch.equal(named["vectors"][offsets[i]:offsets[i + 1]], vectors)
    documents = encoder.encode_document(TEXTS)  # the document window and prompt: other vectors
    assert run("multivector", retrieval_dirs["multivector"], rows, tmp_path / "docs.jsonl", "--task", "document") == 0
    for record, vectors in zip(read_jsonl(tmp_path / "docs.jsonl"), documents):
        assert torch.equal(torch.tensor(record["vectors"]).reshape(-1, encoder.dimension), vectors)


def test_m3_rows_equal_encode_in_both_formats(retrieval_dirs, rows, tmp_path, capsys):
    m3 = ma.M3Encoder.from_pretrained(retrieval_dirs["m3"])
    expected = m3.encode(TEXTS, return_sparse=True, return_colbert_vecs=True)
    flags = ("--return-sparse", "--return-colbert-vecs")
    assert run("m3", retrieval_dirs["m3"], rows, tmp_path / "out.jsonl", *flags) == 0
    got = read_jsonl(tmp_path / "out.jsonl")
    for i, record in enumerate(got):
        assert set(record) == {"id", "dense_vecs", "lexical_weights", "colbert_vecs"}
        assert torch.equal(torch.tensor(record["dense_vecs"]), expected["dense_vecs"][i])
        assert record["lexical_weights"] == expected["lexical_weights"][i]
        assert torch.equal(torch.tensor(record["colbert_vecs"]), expected["colbert_vecs"][i])
    assert run("m3", retrieval_dirs["m3"], rows, tmp_path / "out.safetensors", *flags) == 0
    named, metadata = tensors(tmp_path / "out.safetensors")
    assert set(named) == {"dense_vecs", "lexical_indices", "lexical_values", "lexical_offsets", "colbert_vecs",
                          "colbert_offsets"}
    assert torch.equal(named["dense_vecs"], expected["dense_vecs"])
    lex, col = named["lexical_offsets"].tolist(), named["colbert_offsets"].tolist()
    for i in range(len(TEXTS)):
        weights = expected["lexical_weights"][i]
        assert named["lexical_indices"][lex[i]:lex[i + 1]].tolist() == sorted(map(int, weights))
        assert named["lexical_values"][lex[i]:lex[i + 1]].tolist() == [weights[str(k)] for k in sorted(map(int, weights))]
        assert torch.equal(named["colbert_vecs"][col[i]:col[i + 1]], expected["colbert_vecs"][i])
    assert int(metadata["vocab_size"]) == m3.model.config.vocab_size
    # dense off, sparse on: only the lexical weights; one text on the command line prints its record
    assert main(["embed", "--method", "m3", "--model", str(retrieval_dirs["m3"]), "--text", TEXTS[0],
                 "--no-return-dense", "--return-sparse"]) == 0
    assert json.loads(capsys.readouterr().out) == expected["lexical_weights"][0]
    assert main(["embed", "--method", "m3", "--model", str(retrieval_dirs["m3"]), "--text", "x",
                 "--no-return-dense"]) == 2
    assert "choose one or more of return_dense" in capsys.readouterr().err


def test_another_methods_options_are_refused(retrieval_dirs, rows, tmp_path, capsys):
    assert run("sparse", retrieval_dirs["sparse"], rows, tmp_path / "o.jsonl", "--normalize") == 2
    assert "--normalize: not an option of --method sparse" in capsys.readouterr().err
    assert run("embed", retrieval_dirs["sparse"], rows, tmp_path / "o.jsonl", "--return-sparse") == 2
    assert "--return-sparse: not an option of --method embed" in capsys.readouterr().err
    assert run("multivector", retrieval_dirs["multivector"], rows, tmp_path / "o.csv") == 2
    assert "name a .jsonl or .safetensors file" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()
