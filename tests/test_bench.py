"""The benchmark's own pieces: the corpus it promises, its FLOP count, and one tiny encoder run."""

import dataclasses
import importlib.util
import math

import pytest
import torch

import bench  # scripts/bench.py (conftest puts scripts/ on the path)
from minialign.nn.config import Config


def test_scoring_corpus_length_mix():
    contexts, claims = bench.scoring_corpus(30)
    words = [len(c.split()) for c in contexts]
    assert all(20 <= w < 60 for w in words[0::3])
    assert all(120 <= w <= 420 for w in words[1::3])
    assert all(500 <= w <= 1400 for w in words[2::3])
    assert all(1 <= claim.count(".") <= 4 for claim in claims)
    assert bench.scoring_corpus(30) == (contexts, claims)  # seeded


def test_trained_model_task_labels_follow_their_definition():
    """scripts/trained_alignscore.py: an aligned claim is a context sentence (maybe a word shorter), a
    contradiction replaces 30-60% of one, a neutral one is new words."""
    import random

    import trained_alignscore as task

    rng = random.Random(3)
    for _ in range(60):
        context = bench._text(rng, 20, 60)
        sentences = [s.rstrip(".").lower().split() for s in task._sentences(context)]
        for label in (task.ALIGNED, task.CONTRADICTION):
            claim = task.claim_for(rng, context, label).rstrip(".").lower().split()
            # the source sentence: the one the claim keeps most words of, in place
            kept = max(sum(a == b for a, b in zip(claim, s)) for s in sentences if len(s) == len(claim)) \
                if any(len(s) == len(claim) for s in sentences) else None
            if label == task.ALIGNED:
                assert any(claim == s or (len(s) == len(claim) + 1 and any(claim == s[:i] + s[i + 1:]
                                                                           for i in range(len(s))))
                           for s in sentences)
            else:
                assert kept is not None and 0.3 - 1 / len(claim) <= 1 - kept / len(claim) <= 0.6 + 1 / len(claim)
        neutral = task.claim_for(rng, context, task.NEUTRAL).rstrip(".").lower().split()
        assert 8 <= len(neutral) <= 16 and set(neutral) <= set(bench._WORDS)
    contexts, claims, labels = task.training_pairs(30, seed=1)
    assert sorted(labels) == [0] * 10 + [1] * 10 + [2] * 10 and task.training_pairs(30, seed=1)[1] == claims


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
             "minialign sdpa compiled", "minialign unpadded", "minialign unpadded flex",
             "minialign unpadded, F.linear only"}
    if importlib.util.find_spec("onnxruntime") is not None:
        impls.add("onnxruntime (transformers export)")
    assert {(r["batch"], r["impl"]) for r in rows} == {(b, i) for b in ("2x16", "mixed") for i in impls}
    for row in rows:
        assert math.isfinite(row["tokens/s"]) and row["tokens/s"] > 0
        assert row["of ceiling"] == pytest.approx(row["GFLOP/s"] / ceiling)
        if row["impl"] == "transformers sdpa":
            assert row["vs hf sdpa"] == 1.0
    assert torch.get_num_threads() >= 1


def test_kernel_table_and_one_section_per_cpu_kind(tmp_path):
    """The Machine section's kernel table names both kernels per row count and the one minialign runs;
    BENCHMARKS.md keeps one section per CPU kind, a run replacing its own kind's only."""
    rows = bench.bench_kernels(rounds=1, echo=lambda *a: None)
    assert len(rows) == len(bench.KERNEL_ROWS) * len(bench.KERNEL_SHAPES)
    assert all(r["F.linear GFLOP/s"] > 0 and r["oneDNN packed GFLOP/s"] > 0 for r in rows)
    assert {r["minialign runs"] for r in rows} <= {"F.linear", "oneDNN packed"}
    path = tmp_path / "BENCHMARKS.md"
    bench.write_section(path, "AVX2", "first")
    bench.write_section(path, "AVX-512 with native bf16", "other kind")
    bench.write_section(path, "AVX2", "second")
    text = path.read_text()
    assert "first" not in text and text.count("second") == 1 and "other kind" in text
    assert text.index("# Machine kind: AVX2") < text.index("# Machine kind: AVX-512")
