"""Make tests/products/data/flagembedding_m3/: FlagEmbedding's own BGEM3FlagModel outputs on a tiny random BGE-M3 made
here, for tests/products/test_m3.py. FlagEmbedding is no test dependency, so its outputs are made once and kept:

    python3 -m venv /tmp/fe-venv && /tmp/fe-venv/bin/pip install "transformers==5.24.*" FlagEmbedding==1.4.2
    /tmp/fe-venv/bin/python scripts/make_m3_reference.py tests/products/data/flagembedding_m3

FlagEmbedding 1.4.2 installs beside transformers 5.24 (pip check: no broken requirement), but its package import
loads its LLM rerankers, which import transformers.modeling_attn_mask_utils, gone in transformers 5. The M3 path never
uses them, so an empty stand-in module is put in its place first (below); nothing else is changed.

Writes model/ (an XLM-RoBERTa: 2 layers, 36 wide, a 180-piece Unigram tokenizer trained here, a 64-token window; and
FlagEmbedding's sparse_linear.pt and colbert_linear.pt, torch.save of each Linear's state_dict), reference.safetensors
(dense_vecs, colbert_vecs.<i>, and both scores of the first four texts against the others, as FlagEmbedding's
compute_lexical_matching_score and colbert_score give them) and reference.json (the texts, lexical_weights,
convert_id_to_token of them, the versions).
"""

import json
import shutil
import sys
import types
from pathlib import Path

import torch
from torch import nn

TEXTS = ["The tower was built in Paris and opened in 1889.", "", "Paris Paris Paris, the tower; the tower.",
         "Zürich, Genève et Bâle sont des villes. Жук ёж 東京 😀",  # characters the vocabulary lacks: <unk>
         "word " * 80,  # longer than the 64-token window
         "A short claim.", "The tower was built in Paris and opened in 1889.", "La tour a été construite à Paris."]
CORPUS = ["The tower was built in Paris and opened in 1889.", "La tour a été construite à Paris en 1889.",
          "Der Turm wurde in Paris gebaut.", "El ministro dijo que la empresa creció.",
          "Police said the company grew; officials reported on Monday.", "Zürich, Genève et Bâle sont des villes.",
          "A short claim.", "Numbers 3.14 and $5,000 in the report."] * 20
WINDOW = 64


def tiny_bge_m3(directory: Path) -> None:
    """XLM-R's layout: a SentencePiece-style Unigram tokenizer.json (Metaspace, `<s> A </s>`), the model, the heads."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=180, special_tokens=specials, unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    directory.mkdir(parents=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizer", "model_max_length": WINDOW, "bos_token": "<s>", "eos_token": "</s>",
        "sep_token": "</s>", "cls_token": "<s>", "pad_token": "<pad>", "mask_token": "<mask>", "unk_token": "<unk>"}))
    config = transformers.XLMRobertaConfig(vocab_size=tok.get_vocab_size(), hidden_size=36, num_hidden_layers=2,
                                           num_attention_heads=3, intermediate_size=53,
                                           max_position_embeddings=WINDOW + 2, type_vocab_size=1, pad_token_id=1,
                                           bos_token_id=0, eos_token_id=2)
    torch.manual_seed(0)
    model = transformers.XLMRobertaModel(config, add_pooling_layer=True).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm parameters, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(directory)
    sparse, colbert = nn.Linear(36, 1), nn.Linear(36, 36)
    with torch.no_grad():
        sparse.bias.fill_(0.05)  # some tokens above zero, some at it (relu)
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")  # EncoderOnlyEmbedderM3Model.save's names
    torch.save(colbert.state_dict(), directory / "colbert_linear.pt")


def main(out: Path) -> None:
    import transformers

    stand_in = types.ModuleType("transformers.modeling_attn_mask_utils")  # the module docstring says why
    stand_in.__file__ = "(stand-in)"
    stand_in.__getattr__ = lambda name: (_ for _ in ()).throw(AttributeError(name)) if name.startswith("__") else \
        type(name, (), {})
    sys.modules.setdefault("transformers.modeling_attn_mask_utils", stand_in)
    import FlagEmbedding
    from FlagEmbedding import BGEM3FlagModel
    from importlib.metadata import version
    from safetensors.torch import save_file

    if out.exists():
        shutil.rmtree(out)
    tiny_bge_m3(out / "model")
    m3 = BGEM3FlagModel(str(out / "model"), use_fp16=False, devices="cpu")  # fp32: as it runs on a CPU anyway
    got = m3.encode(TEXTS, batch_size=3, max_length=WINDOW, return_dense=True, return_sparse=True,
                    return_colbert_vecs=True)
    queries, passages = slice(0, 4), slice(4, None)
    lexical = m3.compute_lexical_matching_score(got["lexical_weights"][queries], got["lexical_weights"][passages])
    colbert = [[float(m3.colbert_score(q, p)) for p in got["colbert_vecs"][passages]]
               for q in got["colbert_vecs"][queries]]
    tensors = {"dense_vecs": torch.from_numpy(got["dense_vecs"]).contiguous(),
               "lexical_matching_score": torch.from_numpy(lexical.astype("float32")),
               "colbert_score": torch.tensor(colbert, dtype=torch.float32),
               **{f"colbert_vecs.{i}": torch.from_numpy(v).contiguous() for i, v in enumerate(got["colbert_vecs"])}}
    save_file(tensors, str(out / "reference.safetensors"))
    plain = [{token: float(w) for token, w in weights.items()} for weights in got["lexical_weights"]]
    (out / "reference.json").write_text(json.dumps({
        "texts": TEXTS, "max_length": WINDOW, "lexical_weights": plain,
        "tokens": [{token: float(w) for token, w in item.items()}
                   for item in m3.convert_id_to_token(got["lexical_weights"])],
        "versions": {"FlagEmbedding": version("FlagEmbedding"), "transformers": transformers.__version__,
                     "torch": torch.__version__},
        "made_by": f"scripts/make_m3_reference.py, {FlagEmbedding.__name__}.BGEM3FlagModel (M3Embedder)"},
        ensure_ascii=False, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
