"""The benchmark's own pieces: the corpus it promises, its FLOP count, and one tiny encoder run."""

import dataclasses
import importlib.util
import math

import pytest
import torch

import bench  # scripts/bench.py (conftest puts scripts/ on the path)
from minialign.config import Config


def test_scoring_corpus_length_mix():
    contexts, claims = bench.scoring_corpus(30)
    words = [len(c.split()) for c in contexts]
    assert all(20 <= w < 60 for w in words[0::3])
    assert all(120 <= w <= 420 for w in words[1::3])
    assert all(500 <= w <= 1400 for w in words[2::3])
    assert all(1 <= claim.count(".") <= 4 for claim in claims)
    assert bench.scoring_corpus(30) == (contexts, claims)  # seeded


def test_encoder_flops_counts_matmuls_per_token_and_attention():
    config = Config(vocab_size=10, hidden_size=8, num_layers=2, num_heads=2, intermediate_size=16)
    # per layer and token: q, k, v, output (4 C^2) and up, down (2 C I) multiply-adds; QK^T and PV: 2 L C
    per_token = 2 * (4 * 8 * 8 + 2 * 8 * 16)
    assert bench.encoder_flops(config, [3, 5]) == 2 * sum(n * per_token + 2 * 2 * n * n * 8 for n in (3, 5))


@pytest.mark.slow
def test_encoder_benchmark_times_every_implementation():
    config = dataclasses.replace(Config.from_name("roberta-base"), vocab_size=300, hidden_size=32, num_layers=2,
                                 num_heads=2, intermediate_size=64)
    rows, ceilings = bench.bench_encoder(reps=1, dtypes=["fp32"], config=config, model_name="tiny",
                                         batches={"2x16": [16, 16], "mixed": [16, 5]}, echo=lambda *a: None)
    assert set(ceilings) == {"fp32"} and set(ceilings["fp32"]) == {"F.linear", "minialign Linear"}
    ceiling = max(ceilings["fp32"].values())
    impls = {"transformers eager", "transformers sdpa", "minialign eager", "minialign sdpa", "minialign flex",
             "minialign sdpa compiled", "minialign unpadded", "minialign unpadded flex"}
    if importlib.util.find_spec("onnxruntime") is not None:
        impls.add("onnxruntime (transformers export)")
    assert {(r["batch"], r["impl"]) for r in rows} == {(b, i) for b in ("2x16", "mixed") for i in impls}
    for row in rows:
        assert math.isfinite(row["tokens/s"]) and row["tokens/s"] > 0
        assert row["of ceiling"] == pytest.approx(row["GFLOP/s"] / ceiling)
        if row["impl"] == "transformers sdpa":
            assert row["vs hf sdpa"] == 1.0
    assert torch.get_num_threads() >= 1
