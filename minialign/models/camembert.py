"""CamemBERT: RoBERTa's architecture exactly, under its own model_type (transformers
models/camembert/modular_camembert.py derives every module from RoBERTa's, unchanged). What differs
lives outside the encoder: its config.json (convert/families/camembert.py) and its SentencePiece
Unigram tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from minialign.convert.families import camembert as camembert_format
from minialign.models.roberta import Roberta, RobertaConfig


@dataclass(frozen=True)
class CamembertConfig(RobertaConfig):
    format = camembert_format.FORMAT
    arch: str = "camembert"


class Camembert(Roberta):
    config_class = CamembertConfig
