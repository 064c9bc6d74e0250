"""The grounding detectors at the published shapes against their reference pipelines, random weights, on CPU:

- LettuceDetect base (KRLabsOrg/lettucedect-base-modernbert-en-v1: a ModernBertForTokenClassification of two labels at
  ModernBERT-base's shape): lettucedetect's HallucinationDetector(method="transformer").predict(..., "tokens") per
  example (the package) against ma.HallucinationDetector.predict_batch;
- HHEM-2.1-open (a T5ForTokenClassification at flan-t5-base's shape, saved under `t5.` beside a foundation directory):
  HHEMv2ForSequenceClassification.predict's recipe on transformers' T5ForTokenClassification and AutoTokenizer (the
  template, padding=True, logits[:, 0, :], softmax, column 1: its remote code does not run on transformers 5) against
  ma.HHEM.predict;
- FactCG (yaxili96/FactCG-DeBERTa-v3-Large: a DebertaV2ForSequenceClassification of two labels at deberta-v3-large's
  shape): FactCG's Inferencer (derenlei/FactCG factcg/inference.py: chunking_src, INSTRUCTION_TEMPLATE, the pad token
  the eos token, padding "longest", max_length 2048, softmax column 1, batches of 32) on transformers against
  ma.FactCGScorer.score (no int8 row: a scorer refuses dtype="int8").

- MiniCheck-Flan-T5 (lytang/MiniCheck-Flan-T5-Large: a T5ForConditionalGeneration at flan-t5-large's shape): MiniCheck's
  flan-t5 path (minicheck/inference.py: "predict: " + chunk + "</s>" + claim, one decoder step from token 0, the
  softmax over tokens 3 and 209, the max over chunks) on transformers against ma.MiniCheckScorer.score (no int8 row).

Each directory's vocabulary is cut to a byte-level BPE tokenizer trained here on the timed text (embedders.tokenizer;
the embedding lookup's cost does not depend on the vocabulary's size) with the family's special tokens and
templates. The inputs are text people wrote (human_text.py): each example a context of CONTEXT_WORDS words
(embedders.texts_for: mixed lengths), a question and an answer (rerankers.pairs_for: a docstring's summary and a later
paragraph cut to ANSWER_WORDS words); a detector's claim is its answer. Both sides get the same examples.

Impls, timed rep by rep interleaved with the matmul ceilings (embedders.ceilings at the family's layer shapes; an
ungated feed-forward's, DeBERTa's, at a gated one's shapes of the same FLOPs: shape_view), after a warm-up call of
each (the references and minialign on the first example): the reference (the baseline), minialign fp32, int8
(dtype="int8") and bf16 where the CPU has native bf16. The goal
(GOAL): a minialign row GOAL times the reference's speed, or, where that is above the fp32 ceiling, fp32 at
embedders.CEILING_SHARE of it (embedders.verdict at this GOAL). Useful FLOPs (embedders.flops) count every key of
ModernBERT's local layers and every token of its last layer (the reference's work, as torch's flop counter counts it;
minialign skips the keys out of a local layer's window and runs the last layer for the answer's tokens alone) and
none of DeBERTa's relative-position products. Each minialign row's deviation is the largest difference of
its probabilities from the reference's (LettuceDetect: every answer token's; the others: each example's score). Rows
of data (data.py), never a test.

    python scripts/bench.py --suite detectors --data docs/benchmarks/cpu-<machine>.json --device cpu
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

SECTION = "detectors"
GOAL = 3.0  # minialign's speed over the reference pipeline
EXAMPLES = 4  # timed examples per call: each detector's reps in about 2 minutes on 2 busy cores
CONTEXT_WORDS, ANSWER_WORDS = (40, 320), 40
LETTUCE_WINDOW = 4096  # lettucedetect's HallucinationDetector max_length default
BATCH = 32  # the references' batch (FactCG's Inferencer; HHEM's predict takes the call's pairs at once)
# https://huggingface.co/microsoft/deberta-v3-large/blob/main/config.json: deberta-v3-base's preset at its sizes
DEBERTA_V3_LARGE = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                    "intermediate_size": 4096, "pooler_hidden_size": 1024}
# https://huggingface.co/google/flan-t5-large/blob/main/config.json (lytang/MiniCheck-Flan-T5-Large's): flan-t5-base's
# preset at its sizes
FLAN_T5_LARGE = {"d_model": 1024, "d_kv": 64, "num_heads": 16, "d_ff": 2816, "num_layers": 24,
                 "num_decoder_layers": 24}
# a dry run's shapes (each family's layout at toy size): every step in seconds, figures meaningless
DRY_SHAPES = {"modernbert": {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
                             "intermediate_size": 96},
              "t5": {"d_model": 64, "d_kv": 32, "num_heads": 2, "d_ff": 96, "num_layers": 2, "num_decoder_layers": 2},
              "deberta-v2": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                             "intermediate_size": 96, "pooler_hidden_size": 64}}


@dataclass(frozen=True)
class Detector:
    """A published detector's layout: minialign's preset of its encoder (and the sizes that differ from it), its
    tokenizer's special tokens and templates, whether its feed-forward is gated."""

    name: str
    preset: str
    sizes: dict
    specials: tuple[str, ...]  # ids 0, 1, ...
    single: str
    pair: str | None
    pad: str
    eos: str
    gated: bool


LETTUCE = Detector("LettuceDetect-base (ModernBERT-base)", "modernbert-base", {},
                   # answerdotai/ModernBERT-base's tokenizer: [UNK] [CLS] [SEP] [PAD] [MASK], `[CLS] A [SEP] B [SEP]`
                   ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"), "[CLS]:0 $A:0 [SEP]:0",
                   "[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0", "[PAD]", "[SEP]", True)
HHEM = Detector("HHEM-2.1-open (flan-t5-base)", "flan-t5-base", {},
                # google/flan-t5-base's tokenizer: <pad> 0, </s> 1, <unk> 2, `A </s>`
                ("<pad>", "</s>", "<unk>"), "$A:0 </s>:0", None, "<pad>", "</s>", True)
FACTCG = Detector("FactCG-DeBERTa-v3-Large", "deberta-v3-base", DEBERTA_V3_LARGE,
                  # microsoft/deberta-v3-large's tokenizer: [PAD] [CLS] [SEP] [UNK], `[CLS] A [SEP]`
                  ("[PAD]", "[CLS]", "[SEP]", "[UNK]"), "[CLS]:0 $A:0 [SEP]:0", None, "[PAD]", "[SEP]", False)
MINICHECK_T5 = Detector("MiniCheck-Flan-T5-Large", "flan-t5-base", FLAN_T5_LARGE,
                        ("<pad>", "</s>", "<unk>"), "$A:0 </s>:0", None, "<pad>", "</s>", True)
MODELS = (LETTUCE, HHEM, FACTCG, MINICHECK_T5)


# -- pure parts ------------------------------------------------------------------------------------------

def shape_view(config, *, gated: bool, whole: bool = False) -> SimpleNamespace:
    """The fields embedders.flops / ceilings read, from an encoder's config (every head its own key and value).
    An ungated feed-forward's two products C x I and I x C are a gated one's three over 2I / 3 columns (rounded to
    whole columns where `whole`: the ceiling's shapes)."""
    width = config.intermediate_size if gated else config.intermediate_size * 2 / 3
    return SimpleNamespace(hidden_size=config.hidden_size, head_dim=config.head_dim, num_heads=config.num_heads,
                           kv_heads=config.num_heads, num_layers=config.num_layers,
                           intermediate_size=round(width) if whole else width)


def examples_for(count: int) -> list[tuple[list[str], str, str]]:
    """`count` (context, question, answer) examples of human_text.py (module docstring)."""
    from benchmarks import embedders, rerankers

    contexts = embedders.texts_for(count, seed=0, words=CONTEXT_WORDS)
    return [([context], question, answer)
            for context, (question, answer) in zip(contexts, rerankers.pairs_for(count, ANSWER_WORDS))]


# -- the models ------------------------------------------------------------------------------------------

def tokenizer(directory: Path, detector: Detector, corpus: list[str], *, window: int) -> int:
    """embedders.tokenizer's BPE with the detector's special tokens, its pair template and tokenizer_config.json."""
    from tokenizers import Tokenizer, processors

    from benchmarks import embedders

    vocab = embedders.tokenizer(directory, embedders.Embedder(
        detector.name, detector.preset, "", (), detector.specials, detector.single, detector.pad, "right", 0),
        corpus, window=window)
    if detector.pair:
        tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=detector.single, pair=detector.pair,
                                          special_tokens=[(t, i) for i, t in enumerate(detector.specials)
                                                          if t in detector.single])])
        tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": window, "pad_token": detector.pad,
        "eos_token": detector.eos, "unk_token": detector.specials[detector.specials.index("[UNK]")
                                                                  if "[UNK]" in detector.specials else 2],
        "model_input_names": ["input_ids", "attention_mask"]}))
    return vocab


def hf_config(detector: Detector, vocab: int, *, dry_run: bool) -> dict:
    """The transformers config's fields: the preset's, the detector's sizes, the vocabulary's, two labels."""
    from minialign.nn.config import Config

    hf = {**Config.from_name(detector.preset).to_hf(), **detector.sizes, "vocab_size": vocab,
          "pad_token_id": detector.specials.index(detector.pad), "num_labels": 2}
    hf.pop("architectures", None)
    if dry_run:
        hf.update(DRY_SHAPES[hf["model_type"]])
    return hf


def build_lettuce(root: Path, corpus: list[str], *, dry_run: bool = False) -> Path:
    import transformers

    directory = root / "lettuce"
    hf = hf_config(LETTUCE, tokenizer(directory, LETTUCE, corpus, window=LETTUCE_WINDOW), dry_run=dry_run)
    hf.pop("model_type")
    hf.update(cls_token_id=1, bos_token_id=1, sep_token_id=2, eos_token_id=2)  # the tokenizer's [CLS], [SEP]
    torch.manual_seed(0)
    transformers.ModernBertForTokenClassification(transformers.ModernBertConfig(**hf)).eval() \
        .save_pretrained(directory)
    return directory


def build_hhem(root: Path, corpus: list[str], *, dry_run: bool = False):
    """(HHEM's directory, the T5ForTokenClassification it holds under `t5.`): test_hhem.py's layout."""
    import transformers
    from safetensors.torch import save_file

    from minialign.products.hhem import PROMPT

    foundation, directory = root / "flan-t5", root / "hhem"
    hf = hf_config(HHEM, tokenizer(foundation, HHEM, corpus, window=512), dry_run=dry_run)
    hf.pop("model_type")
    config = transformers.T5Config(**hf)
    config.save_pretrained(foundation)
    torch.manual_seed(0)
    model = transformers.T5ForTokenClassification(config).eval()
    directory.mkdir()
    save_file({"t5." + k: v.contiguous() for k, v in model.state_dict().items()
               if k != "transformer.encoder.embed_tokens.weight"}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["HHEMv2ForSequenceClassification"], "model_type": "HHEMv2", "foundation": str(foundation),
        "prompt": PROMPT}))
    return directory, model


def build_factcg(root: Path, corpus: list[str], *, dry_run: bool = False) -> Path:
    import transformers

    directory = root / "factcg"
    hf = hf_config(FACTCG, tokenizer(directory, FACTCG, corpus, window=2048), dry_run=dry_run)
    hf.pop("model_type")
    torch.manual_seed(0)
    transformers.DebertaV2ForSequenceClassification(transformers.DebertaV2Config(**hf)).eval() \
        .save_pretrained(directory)
    return directory


def build_minicheck_t5(root: Path, corpus: list[str], *, dry_run: bool = False) -> Path:
    """A T5ForConditionalGeneration at flan-t5-large's shape (MiniCheck-Flan-T5-Large's class), its tokenizer's."""
    import transformers

    directory = root / "minicheck-flan-t5"
    hf = hf_config(MINICHECK_T5, tokenizer(directory, MINICHECK_T5, corpus, window=2048), dry_run=dry_run)
    for name in ("model_type", "num_labels"):
        hf.pop(name)
    hf["is_encoder_decoder"] = True  # the encoder family's export writes False (T5EncoderModel's); here the whole model
    torch.manual_seed(0)
    transformers.T5ForConditionalGeneration(transformers.T5Config(**hf)).eval().save_pretrained(directory)
    return directory


def chunking_src(document: str, splitter, word_count, max_chunk_size: int) -> list[str]:
    """factcg/inference.py Inferencer.chunking_src, the sentences and word counts FactCGScorer's (nltk's there)."""
    chunks, chunk_size, chunk = [], 0, ""
    for s in splitter(document):
        token_count = word_count(s)
        if chunk_size + token_count <= max_chunk_size:
            chunk = "\n".join([chunk, s]).strip("\n")
            chunk_size += token_count
        else:
            chunks.append(chunk.strip("\n"))
            chunk, chunk_size = s, token_count
    if chunk_size > 0:
        chunks.append(chunk.replace(" \n ", "\n").strip("\n").strip())
    return chunks


# -- the sides -------------------------------------------------------------------------------------------

def sides(detector: Detector, root: Path, dtypes: list[str], *, dry_run: bool):
    """(the reference's impl name, {dtype: minialign's runner}, calls): `calls(examples)` is (the reference's call,
    {impl: minialign's call}, each example's tokens) on those examples, every call returning its probabilities as one
    flat float tensor (the answer tokens' or the scores')."""
    import warnings

    import transformers

    import minialign as ma
    from minialign.products import factcg, hhem
    from benchmarks import human_text

    table = {"fp32": {"dtype": torch.float32}, "int8": {"dtype": "int8"}, "bf16": {"dtype": torch.bfloat16}}
    corpus = list(human_text.passages())
    flat = lambda found: torch.tensor([t["prob"] for tokens in found for t in tokens])  # noqa: E731
    if detector is LETTUCE:
        from lettucedetect.detectors.prompt_utils import PromptUtils
        from lettucedetect.models.inference import HallucinationDetector

        directory = build_lettuce(root, corpus, dry_run=dry_run)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peer = HallucinationDetector(method="transformer", model_path=str(directory), max_length=LETTUCE_WINDOW,
                                         device="cpu")
        runners = {name: ma.HallucinationDetector.from_pretrained(directory, max_length=LETTUCE_WINDOW,
                                                                  **table[name]) for name in dtypes}
        tok = transformers.AutoTokenizer.from_pretrained(directory)

        def calls(examples):
            contexts, questions, answers = ([e[i] for e in examples] for i in range(3))
            lengths = [len(tok(PromptUtils.format_context(c, q, "en"), a)["input_ids"]) for c, q, a in examples]
            reference = lambda: flat([peer.predict(context=c, question=q, answer=a,  # noqa: E731
                                                   output_format="tokens") for c, q, a in examples])
            return reference, {f"HallucinationDetector.predict_batch {name}": (
                lambda r=runner: flat(r.predict_batch(contexts, answers, questions, output_format="tokens",
                                                      warn_truncation=False))) for name, runner in runners.items()}, \
                lengths

        return "lettucedetect HallucinationDetector.predict fp32", runners, calls
    if detector is HHEM:
        directory, model = build_hhem(root, corpus, dry_run=dry_run)
        tok = transformers.AutoTokenizer.from_pretrained(directory.parent / "flan-t5")
        runners = {name: ma.HHEM.from_pretrained(directory, **table[name]) for name in dtypes}

        def calls(examples):
            pairs = [(" ".join(c), a) for c, _, a in examples]
            texts = [hhem.PROMPT.format(text1=p, text2=h) for p, h in pairs]

            def reference():  # HHEMv2ForSequenceClassification.predict
                inputs = tok(texts, return_tensors="pt", padding=True)
                return torch.softmax(model(**inputs).logits[:, 0, :], dim=-1)[:, 1]

            return reference, {f"HHEM.predict {name}": (lambda r=runner: r.predict(pairs, warn_truncation=False))
                               for name, runner in runners.items()}, [len(ids) for ids in tok(texts)["input_ids"]]

        return "HHEM's predict on transformers T5ForTokenClassification fp32", runners, calls
    if detector is MINICHECK_T5:
        return minicheck_t5_sides(root, corpus, dtypes, table, dry_run=dry_run)
    directory = build_factcg(root, corpus, dry_run=dry_run)
    model = transformers.DebertaV2ForSequenceClassification.from_pretrained(directory).eval()
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    tok.pad_token = tok.eos_token  # Inferencer.batch_tokenize
    runners = {name: ma.FactCGScorer.from_pretrained(directory, **table[name]) for name in dtypes if name != "int8"}

    def calls(examples):
        documents, claims = [" ".join(c) for c, _, _ in examples], [a for _, _, a in examples]
        chunked = [chunking_src(d, runners["fp32"].splitter, runners["fp32"].word_counter, factcg.CHUNK_WORDS)
                   for d in documents]
        texts = [factcg.TEMPLATE.format(text_a=c, text_b=claim) for chunks, claim in zip(chunked, claims)
                 for c in chunks]

        def supported(batch_texts):  # Inferencer.inference: P(supported) of a batch
            batch = tok(batch_texts, max_length=factcg.MAX_LENGTH, truncation="only_first", padding="longest",
                        return_tensors="pt")
            return torch.softmax(model(**batch).logits, dim=-1)[:, 1]

        def reference():  # Inferencer.batch_inference: each example's max over its chunks
            return max_over_chunks(texts, chunked, supported)

        return reference, {f"FactCGScorer.score {name}": (
            lambda r=runner: torch.tensor(r.score(documents, claims, warn_truncation=False)))
            for name, runner in runners.items()}, \
            [len(ids) for ids in tok(texts, max_length=factcg.MAX_LENGTH, truncation=True)["input_ids"]]

    return "FactCG's Inferencer on transformers DebertaV2ForSequenceClassification fp32", runners, calls


def max_over_chunks(texts: list[str], chunked: list[list[str]], supported) -> torch.Tensor:
    """FactCG's and MiniCheck's Inferencer.batch_inference: `supported` (a batch's probabilities) over the chunks'
    texts in batches of BATCH, then each example's max over its own chunks."""
    scores = torch.cat([supported(texts[start:start + BATCH]) for start in range(0, len(texts), BATCH)])
    return torch.stack([s.max() for s in torch.split(scores, [len(chunks) for chunks in chunked])])


def minicheck_t5_sides(root: Path, corpus: list[str], dtypes: list[str], table: dict, *, dry_run: bool):
    """`sides` for MiniCheck-Flan-T5: the reference is MiniCheck's flan-t5 path on transformers (minicheck/inference.py
    Inferencer: "predict: " + chunk + "</s>" + claim, cut at 2048, one decoder step from token 0, softmax over the
    logits of tokens 3 and 209, the max over chunks) on the chunks MiniCheckScorer makes (tests/products/
    test_minicheck_t5.py checks they are MiniCheck's)."""
    import transformers

    import minialign as ma
    from minialign.products import minicheck

    directory = build_minicheck_t5(root, corpus, dry_run=dry_run)
    model = transformers.T5ForConditionalGeneration.from_pretrained(directory).eval()
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    runners = {name: ma.MiniCheckScorer.from_pretrained(directory, **table[name]) for name in dtypes if name != "int8"}

    def calls(examples):
        documents, claims = [" ".join(c) for c, _, _ in examples], [a for _, _, a in examples]
        chunked = [runners["fp32"].chunks(d) for d in documents]
        texts = [runners["fp32"].text(c, claim) for chunks, claim in zip(chunked, claims) for c in chunks]

        def supported(batch_texts):  # Inferencer.inference (flan-t5): one decoder step, P(supported) of a batch
            batch = tok(batch_texts, max_length=minicheck.T5_MAX_LENGTH, truncation=True, padding="longest",
                        return_tensors="pt")
            start_ids = torch.full((batch["input_ids"].size(0), 1), minicheck.T5_START)
            logits = model(**batch, decoder_input_ids=start_ids).logits[:, 0, list(minicheck.T5_LABEL_IDS)]
            return torch.softmax(logits, dim=-1)[:, 1]

        def reference():  # Inferencer.batch_inference (flan-t5): each example's max over its chunks
            return max_over_chunks(texts, chunked, supported)

        return reference, {f"MiniCheckScorer.score {name}": (
            lambda r=runner: torch.tensor(r.score(documents, claims, warn_truncation=False)))
            for name, runner in runners.items()}, \
            [len(ids) for ids in tok(texts, max_length=minicheck.T5_MAX_LENGTH, truncation=True)["input_ids"]]

    return "MiniCheck's flan-t5 path on transformers T5ForConditionalGeneration fp32", runners, calls


def suite_rows(*, reps: int, device: str = "cpu", dry_run: bool = False, add=lambda rows: None,
               echo=print, models: tuple[Detector, ...] = MODELS, examples: int = EXAMPLES) -> list[dict]:
    """The section's rows (data.py), added to `add` per detector as measured (module docstring)."""
    import warnings

    from minialign.loading import cpu_has_native
    from minialign.nn import int8 as int8_kernel

    from benchmarks import data, embedders
    from benchmarks.encoder import row_line
    from benchmarks.timing import repeat

    if torch.device(device).type != "cpu":
        raise ValueError(f"the detectors section runs on CPU (int8, the ceiling rule); not {device}")
    dtypes = ["fp32", *(["int8"] if int8_kernel.available() else []),
              *(["bf16"] if cpu_has_native(torch.bfloat16, unknown=False) else [])]
    timed = examples_for(examples)
    commit, rows = data.git_commit(), []
    for detector in models:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        echo(f"{SECTION} | {detector.name}: building (load {load}; {torch.get_num_threads()} threads)")
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the references' notices
            peer, runners, make = sides(detector, Path(tmp), dtypes, dry_run=dry_run)
            reference, ours, lengths = make(timed)
            warm_reference, warm, _ = make(timed[:1])  # first-call allocations (a whole call of a peer: a minute)
            config = next(iter(runners.values())).model.config
            config = getattr(config, "encoder", config)
            view = shape_view(config, gated=detector.gated)
            work = embedders.flops(view, lengths)
            used = [name.rsplit(" ", 1)[1] for name in ours]
            ceiling_calls, ceiling_work, shape = embedders.ceilings(
                shape_view(config, gated=detector.gated, whole=True), sum(lengths), used,
                work=embedders.DRY_CEILING_WORK if dry_run else embedders.CEILING_WORK)
            calls = {peer: reference, **ours}
            calls.update({f"matmul ceiling {label}": call for label, call in ceiling_calls.items()})
            shape_name = "toy size (dry run)" if dry_run else "published shape"
            case = (f"{detector.name} ({shape_name}, random weights), {len(timed)} examples, {min(lengths)}-"
                    f"{max(lengths)} tokens ({sum(lengths)})")
            echo(f"{SECTION} | {case}: timing {len(calls)} calls ({reps} reps after a warm-up; load {load})")
            outputs = {}
            with torch.inference_mode():
                times = repeat(calls, reps=reps, device=device, outputs=outputs, warm_up={
                    peer: warm_reference, **warm, **{n: c for n, c in calls.items() if n.startswith("matmul")}})
            rate = {label: ceiling_work / times[f"matmul ceiling {label}"].median / 1e9 for label in ceiling_calls}
            best = {dtype: max(r for label, r in rate.items() if label.startswith(dtype)) for dtype in used}
            expected = outputs[peer].float().reshape(-1)
            found = [data.row(SECTION, case, f"matmul ceiling {label}", baseline=None, ratio=None,
                              **times[f"matmul ceiling {label}"].figures(), gflop_s=r, shape=shape, commit=commit)
                     for label, r in rate.items()]
            gflop_s = {name: work / times[name].median / 1e9 for name in calls if not name.startswith("matmul")}
            ratios = {name.rsplit(" ", 1)[1]: times[peer].median / times[name].median for name in ours}
            fp32_name = next(name for name in ours if name.endswith(" fp32"))
            goal = embedders.verdict(ratios, goal=GOAL, fp32_share=gflop_s[fp32_name] / best["fp32"],
                           peer_share=gflop_s[peer] / best["fp32"])
            for name in (peer, *ours):
                t, dtype = times[name], "fp32" if name == peer else name.rsplit(" ", 1)[1]
                deviation = None if name == peer else (outputs[name].float().reshape(-1) - expected).abs().max().item()
                found.append(data.row(
                    SECTION, case, name, baseline=peer, ratio=times[peer].median / t.median, **t.figures(),
                    tokens_per_s=sum(lengths) / t.median, pairs_per_s=len(timed) / t.median,
                    gflop_s=gflop_s[name], of_ceiling=gflop_s[name] / best[dtype], inputs=len(timed),
                    weights="random", deviation=deviation, deviation_from=None if name == peer else peer,
                    commit=commit, note=f"load {load}" + ("; " + goal if name == fp32_name else "")))
            # the next model is built with these freed
            peer = reference = ours = runners = make = calls = warm = warm_reference = outputs = None
        for made in found:
            echo(row_line(made))
        add(found)
        rows += found
    return rows
