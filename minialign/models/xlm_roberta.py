"""XLM-RoBERTa: RoBERTa's architecture exactly, under its own model_type (transformers
models/xlm_roberta/modular_xlm_roberta.py derives every module from RoBERTa's, unchanged: same
positions after pad_token_id, same layers, same RobertaClassificationHead on the first token, same MLM
head, weights under `roberta.` / `lm_head.`). What differs lives outside the encoder: its config.json
(convert/families/xlm_roberta.py) and its SentencePiece Unigram tokenizer (`<s> A </s></s> B </s>`,
read from tokenizer.json). CamemBERT is the same again (camembert.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from minialign.convert.families import xlm_roberta as xlm_roberta_format
from minialign.models.roberta import Roberta, RobertaConfig


@dataclass(frozen=True)
class XLMRobertaConfig(RobertaConfig):
    format = xlm_roberta_format.FORMAT
    arch: str = "xlm-roberta"


class XLMRoberta(Roberta):
    config_class = XLMRobertaConfig

