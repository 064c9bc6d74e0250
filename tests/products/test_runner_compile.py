"""A runner's `compile`: False, True (torch.compile's default mode) or a mode by name (products/choices.py
COMPILE_MODES), refused otherwise before anything loads; the mode reaches the model's compile, and the modes that
replay CUDA graphs have the engine pad each batch's rows to a power of two (runtime/engine.py cuda_graphs)."""

import pytest
import torch

import minialign as ma
from minialign.products.choices import COMPILE_MODES, CUDA_GRAPH_MODES
from minialign.products.runner import COMPILE_BUCKET, LoadOptions, compile_mode


def test_compile_takes_false_true_or_a_mode_by_name():
    assert compile_mode(False) is None and compile_mode(True) == "default"
    assert [compile_mode(mode) for mode in COMPILE_MODES] == list(COMPILE_MODES)
    assert set(CUDA_GRAPH_MODES) < set(COMPILE_MODES)
    for bad in ("fast", "", None, 1, "Reduce-Overhead"):
        with pytest.raises(ValueError, match="compile must be False, True or one of 'default', 'reduce-overhead'"):
            compile_mode(bad)
    with pytest.raises(ValueError, match="got 'fast'"):
        LoadOptions(compile="fast")
    with pytest.raises(ValueError, match="got 'fast'"):  # before the (missing) model is looked for
        ma.SentenceEncoder.from_pretrained("/nonexistent/model", compile="fast")


@pytest.mark.parametrize("compile", [True, *COMPILE_MODES])
def test_the_mode_reaches_the_model_and_the_engine(minilm_dir, monkeypatch, compile):
    modes = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **options: modes.append(options))
    encoder = ma.SentenceEncoder.from_pretrained(minilm_dir, compile=compile)
    assert modes == [{"mode": compile_mode(compile)}]
    assert not encoder.unpad and encoder.engine.bucket == COMPILE_BUCKET
    assert encoder.engine.cuda_graphs is False  # on the CPU torch replays no graphs: no rows padded for them
    plain = ma.SentenceEncoder.from_pretrained(minilm_dir)
    assert not plain.engine.cuda_graphs and plain.engine.bucket == 1 and len(modes) == 1


@pytest.mark.slow
def test_reduce_overhead_compiles_on_the_cpu_and_drops_the_padding_rows(tiny_family):
    """On the CPU torch records no CUDA graphs: "reduce-overhead" compiles, and the embeddings are eager's within
    1e-5; with the engine's CUDA-graph rows on (what a runner on CUDA sets), each batch runs at a power of two of
    rows and the extra rows' results are dropped."""
    directory = tiny_family.sentence_transformers("bert")
    texts = [" ".join(["word"] * (1 + (i * 5) % 17)) + f" {i}" for i in range(11)]
    eager = ma.SentenceEncoder.from_pretrained(directory, batch_size=3).encode(texts)
    compiled = ma.SentenceEncoder.from_pretrained(directory, batch_size=3, compile="reduce-overhead")
    rows = []
    forward = compiled.forward
    compiled.forward = lambda batch: rows.append(batch["input_ids"].size(0)) or forward(batch)
    got = compiled.encode(texts)
    assert got.shape == eager.shape and rows == [3, 3, 3, 2]
    torch.testing.assert_close(got, eager, atol=1e-5, rtol=1e-5)
    compiled.engine.cuda_graphs, rows[:] = True, []
    got = compiled.encode(texts)
    assert got.shape == eager.shape and rows == [4, 4, 4, 2]  # 3, 3, 3 and 2 sequences
    torch.testing.assert_close(got, eager, atol=1e-5, rtol=1e-5)
