"""XLM-RoBERTa and CamemBERT: RoBERTa's architecture exactly, under their own model_type
(transformers models/xlm_roberta/modular_xlm_roberta.py and models/camembert/modular_camembert.py
derive every module from RoBERTa's, unchanged: same positions after pad_token_id, same layers, same
RobertaClassificationHead on the first token, same MLM head, weights under `roberta.` / `lm_head.`).
What differs lives outside the encoder: their config rows (convert/hf_config.py) and their
SentencePiece Unigram tokenizers (`<s> A </s></s> B </s>`, read from tokenizer.json).
"""

from __future__ import annotations

from minialign.models.roberta import Roberta


class XLMRoberta(Roberta):
    arch = "xlm-roberta"


class Camembert(Roberta):
    arch = "camembert"
