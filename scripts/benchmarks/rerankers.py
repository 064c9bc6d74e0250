"""An LLM reranker at the published shape: Classifier against sentence-transformers' CrossEncoder on a
Qwen3-Reranker-0.6B-shaped LogitScore reranker (a Qwen3ForCausalLM at the qwen3-embedding-0.6b preset's shape, the
same as Qwen/Qwen3-Reranker-0.6B's config.json but for its tied embeddings, which this one has too; then LogitScore of
"yes" and "no"), random weights, on CPU.

The directory is what CrossEncoder saves for a causal LM directory: the vocabulary cut to a byte-level BPE tokenizer
trained here on the timed text (as embedders.py's; "yes", "no" and the ChatML tokens in it), Qwen3-Reranker's prompt
as a chat template over sentence-transformers' "query" / "document" roles (TEMPLATE), padding on the left. Pairs are
human_text.py's (a docstring's summary and a later paragraph), documents cut to DOC_WORDS words.

Impls, timed rep by rep interleaved with the matmul ceilings (embedders.ceilings): CrossEncoder.predict fp32 (the
baseline; it keeps the logits of the last position only, logits_to_keep=1), Classifier.predict fp32, int8, bf16 where
the CPU has native bf16. The goal (GOAL): a minialign row GOAL times CrossEncoder.predict's speed (embedders.verdict,
its ceiling rule). int8's quality against minialign fp32: rerank_quality (Spearman per query, top-1 agreement) on
QUALITY queries x candidates. Rows of data (data.py), never a test.

    python scripts/bench.py --suite rerankers --data docs/benchmarks/cpu-<machine>.json --device cpu
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

SECTION = "rerankers"
PRESET = "qwen3-embedding-0.6b"  # Qwen3-Reranker-0.6B's shape (its config.json: 28 layers, 1024 wide, 16 / 8 heads)
PAIRS, DOC_WORDS = 8, 80  # timed pairs per call, each document's words
QUALITY = (4, 5)  # queries x candidates int8's ranking is judged on
QUALITY_WORDS = 24
WINDOW = 512
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen3-Reranker-0.6B's model card (format_instruction and its prefix / suffix) over the pair roles; the instruction
# a system message may replace
TEMPLATE = (
    '{%- set instruction = namespace(text="Given a web search query, retrieve relevant passages that answer the '
    'query") -%}{%- for m in messages -%}{%- if m.role == "system" -%}{%- set instruction.text = m.content -%}'
    '{%- endif -%}{%- endfor -%}<|im_start|>system\nJudge whether the Document meets the requirements based on the '
    'Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    '<Instruct>: {{ instruction.text }}\n{%- for m in messages -%}{%- if m.role == "query" %}\n<Query>: '
    '{{ m.content }}{%- elif m.role == "document" %}\n<Document>: {{ m.content }}{%- endif -%}{%- endfor -%}'
    '<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n')
PEER = "CrossEncoder.predict fp32"


def build(root: Path, corpus: list[str], *, dry_run: bool = False) -> Path:
    """The reranker's CrossEncoder directory under `root` (module docstring)."""
    import transformers
    from sentence_transformers import CrossEncoder
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from minialign.nn.config import Config

    from benchmarks import embedders

    base = root / "reranker-lm"
    base.mkdir(parents=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus + ["yes", "no"] * 50, trainers.BpeTrainer(
        vocab_size=embedders.TOKENIZER_VOCAB, special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(base / "tokenizer.json"))
    (base / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": WINDOW, "pad_token": SPECIALS[0],
        "eos_token": SPECIALS[2], "padding_side": "left", "chat_template": TEMPLATE}))
    hf = {**Config.from_name(PRESET).to_hf(), "vocab_size": tok.get_vocab_size(), "pad_token_id": 0,
          "tie_word_embeddings": True}
    if dry_run:
        hf.update(embedders.DRY_SHAPE)
    hf.pop("architectures", None)
    hf.pop("model_type", None)
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**hf)).eval().save_pretrained(base)
    directory = root / "reranker"
    CrossEncoder(str(base), device="cpu", max_length=WINDOW).save(str(directory))
    return directory


def pairs_for(count: int, words: int, *, offset: int = 0) -> list[tuple[str, str]]:
    """`count` (query, document) pairs of human_text.py, each document cut to its first `words` words."""
    from benchmarks import human_text

    found = human_text.query_pairs()[offset:offset + count]
    return [(q, " ".join(d.split()[:words])) for q, d in found]


def suite_rows(*, reps: int, device: str = "cpu", dry_run: bool = False, add=lambda rows: None,
               echo=print) -> list[dict]:
    """The section's rows (data.py), added to `add` as measured (module docstring)."""
    import warnings

    from sentence_transformers import CrossEncoder

    from minialign.loading import cpu_has_native
    from minialign.nn import int8 as int8_kernel
    from minialign.products.classifier import Classifier

    from benchmarks import data, embedders, human_text
    from benchmarks.encoder import row_line
    from benchmarks.int8 import rerank_quality
    from benchmarks.timing import repeat

    if torch.device(device).type != "cpu":
        raise ValueError(f"the rerankers section runs on CPU (int8, the ceiling rule); not {device}")
    dtypes = ["fp32", *(["int8"] if int8_kernel.available() else []),
              *(["bf16"] if cpu_has_native(torch.bfloat16, unknown=False) else [])]
    table = {"fp32": {"dtype": torch.float32}, "int8": {"dtype": "int8"}, "bf16": {"dtype": torch.bfloat16}}
    timed = pairs_for(PAIRS, DOC_WORDS)
    queries, candidates = QUALITY
    judged = pairs_for(queries * candidates, QUALITY_WORDS, offset=PAIRS)
    judged_queries, judged_docs = [q for q, _ in judged[:queries]], [d for _, d in judged]
    commit, load = data.git_commit(), ", ".join(f"{x:.2f}" for x in os.getloadavg())
    echo(f"{SECTION} | building (load {load}; {torch.get_num_threads()} threads)")
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notices on the peer's side; the window cuts no pair here
        directory = build(Path(tmp), list(human_text.passages()), dry_run=dry_run)
        peer = CrossEncoder(str(directory), device="cpu", max_length=WINDOW)
        ours = {f"Classifier.predict {name}": Classifier.from_pretrained(directory, max_length=WINDOW, **table[name])
                for name in dtypes}
        fp32 = ours["Classifier.predict fp32"]
        queries_, documents = [q for q, _ in timed], [d for _, d in timed]
        encoded = fp32.chat.encode(fp32.tokenizer, fp32.conversations(timed), fp32.max_length)
        lengths = [len(ids) for ids in encoded.ids]
        work = embedders.flops(fp32.model.encoder.config, lengths)
        ceiling_calls, ceiling_work, shape = embedders.ceilings(
            fp32.model.encoder.config, sum(lengths), dtypes,
            work=embedders.DRY_CEILING_WORK if dry_run else embedders.CEILING_WORK)
        calls = {PEER: lambda: peer.predict(timed, batch_size=32, convert_to_tensor=True)}
        calls.update({name: (lambda r=runner: r.predict(queries_, documents, warn_truncation=False))
                      for name, runner in ours.items()})
        calls.update({f"matmul ceiling {label}": call for label, call in ceiling_calls.items()})
        shape_name = "toy size (dry run)" if dry_run else "published shape"
        case = (f"Qwen3-Reranker-0.6B-shaped LogitScore reranker ({shape_name}, random weights), {len(timed)} pairs "
                f"in Qwen3-Reranker's template, {min(lengths)}-{max(lengths)} tokens ({sum(lengths)})")
        echo(f"{SECTION} | {case}: timing {len(calls)} calls ({reps} reps after a warm-up; load {load})")
        outputs = {}
        with torch.inference_mode():
            warm = {name: (lambda r=runner: r.predict(queries_[:2], documents[:2], warn_truncation=False))
                    for name, runner in ours.items()}
            warm[PEER] = lambda: peer.predict(timed[:2], batch_size=32)
            times = repeat(calls, reps=reps, device=device, outputs=outputs,
                           warm_up={**warm, **{n: c for n, c in calls.items() if n.startswith("matmul")}})
            rate = {label: ceiling_work / times[f"matmul ceiling {label}"].median / 1e9 for label in ceiling_calls}
            best = {dtype: max(r for label, r in rate.items() if label.startswith(dtype)) for dtype in dtypes}
            reference = torch.as_tensor(outputs[PEER]).float().cpu().reshape(-1)
            rows = [data.row(SECTION, case, f"matmul ceiling {label}", baseline=None, ratio=None,
                             **times[f"matmul ceiling {label}"].figures(), gflop_s=r, shape=shape, commit=commit)
                    for label, r in rate.items()]
            gflop_s = {name: work / times[name].median / 1e9 for name in (PEER, *ours)}
            ratios = {name.rsplit(" ", 1)[1]: times[PEER].median / times[name].median for name in ours}
            goal = embedders.verdict(ratios, fp32_share=gflop_s["Classifier.predict fp32"] / best["fp32"],
                                     peer_share=gflop_s[PEER] / best["fp32"])
            for name in (PEER, *ours):
                t, dtype = times[name], "fp32" if name == PEER else name.rsplit(" ", 1)[1]
                deviation = None if name == PEER else (
                    torch.as_tensor(outputs[name]).float().cpu().reshape(-1) - reference).abs().max().item()
                rows.append(data.row(
                    SECTION, case, name, baseline=PEER, ratio=times[PEER].median / t.median, **t.figures(),
                    tokens_per_s=sum(lengths) / t.median, pairs_per_s=len(timed) / t.median, gflop_s=gflop_s[name],
                    of_ceiling=gflop_s[name] / best[dtype], inputs=len(timed), weights="random", deviation=deviation,
                    deviation_from=PEER if name != PEER else None, commit=commit,
                    note=f"load {load}" + ("; " + goal if name == "Classifier.predict fp32" else "")))
            if "Classifier.predict int8" in ours:  # int8's ranking against minialign fp32
                grid = [(q, d) for q in judged_queries for d in judged_docs[:candidates]]
                scores = {name: ours[name].predict([q for q, _ in grid], [d for _, d in grid],
                                                   activation="none").view(queries, candidates)
                          for name in ("Classifier.predict fp32", "Classifier.predict int8")}
                found = rerank_quality(scores["Classifier.predict fp32"], scores["Classifier.predict int8"])
                rows.append(data.row(
                    SECTION, f"Qwen3-Reranker-0.6B-shaped int8 ranking, {queries} queries x {candidates} candidates "
                             f"of <= {QUALITY_WORDS} words", "Classifier.predict int8", baseline=None, ratio=None,
                    inputs=len(grid), weights="random",
                    deviation=(scores["Classifier.predict int8"] - scores["Classifier.predict fp32"]).abs().max().item(),
                    deviation_from="Classifier.predict fp32", commit=commit,
                    note=f"Spearman mean {found['Spearman mean']:.4f}, worst {found['Spearman worst']:.4f}; top-1 "
                         f"agreement {found['top-1 agreement']:.2f}; raw logit differences (activation none)"))
        peer = ours = fp32 = None
    for made in rows:
        echo(row_line(made))
    add(rows)
    return rows
