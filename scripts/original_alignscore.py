"""The original AlignScore pipeline (src/alignscore/inference.py, Inferencer), re-implemented on
transformers modules: the reference that tests/products/test_scorer.py checks minialign's scores against and
that scripts/bench.py times minialign against.

Deliberately independent of minialign (its own chunking, tokenization and aggregation), so that
a bug in minialign's version of the algorithm shows up as a difference. As the original: each
example's (chunk, sentence) pairs in mini-batches of `batch_size`, every pair padded to 512
tokens, the MLM head run on every forward. One documented difference: a pair whose sentence alone
exceeds the window falls back to longest-first truncation on its own, where the original falls
back for the whole mini-batch holding it.

Needs transformers (the `test` extra).
"""

from __future__ import annotations

import torch

MAX_LENGTH = 512
WORDS_PER_CHUNK = 350  # AlignScore inference.py: n_chunk = len(premise.strip().split()) // 350 + 1


class OriginalAlignScore:
    def __init__(self, parts: dict, tokenizer, mode: str, splitter, *, batch_size: int = 32):
        """parts: {"backbone": a transformers BertModel/RobertaModel, "mlm_head": its MLM head module,
        "bin_layer", "tri_layer", "reg_layer": nn.Linear}, all holding the checkpoint's weights.
        tokenizer: a transformers tokenizer; splitter: str -> list[str]."""
        self.parts, self.tokenizer, self.mode, self.splitter = parts, tokenizer, mode, splitter
        self.batch_size = batch_size

    def _tokenize(self, premises, hypos):
        rows = []
        for p, h in zip(premises, hypos):
            try:
                rows.append(self.tokenizer(p, h, truncation="only_first", max_length=MAX_LENGTH))
            except Exception:  # the hypothesis alone is too long
                rows.append(self.tokenizer(p, h, truncation="longest_first", max_length=MAX_LENGTH))
        return self.tokenizer.pad({"input_ids": [r["input_ids"] for r in rows]}, padding="max_length",
                                  max_length=MAX_LENGTH, return_tensors="pt")

    def inference(self, premises, hypos):
        """(reg, P(aligned) from bin, tri probabilities) of each pair."""
        device = next(self.parts["backbone"].parameters()).device
        reg, bin_, tri = [], [], []
        for i in range(0, len(premises), self.batch_size):
            batch = self._tokenize(premises[i:i + self.batch_size], hypos[i:i + self.batch_size]).to(device)
            with torch.no_grad():
                base = self.parts["backbone"](**batch)
                self.parts["mlm_head"](base.last_hidden_state)  # the original runs it on every forward
                pooled = base.pooler_output
                reg.append(self.parts["reg_layer"](pooled)[:, 0].float().cpu())
                bin_.append(torch.softmax(self.parts["bin_layer"](pooled).float(), -1)[:, 1].cpu())
                tri.append(torch.softmax(self.parts["tri_layer"](pooled).float(), -1).cpu())
        return torch.cat(reg), torch.cat(bin_), torch.cat(tri)

    def per_example(self, premise, hypo) -> float:
        sentences = self.splitter(premise) or [""]
        n_chunk = len(premise.strip().split()) // WORDS_PER_CHUNK + 1
        n_chunk = max(len(sentences) // n_chunk, 1)
        chunks = [" ".join(sentences[i:i + n_chunk]) for i in range(0, len(sentences), n_chunk)]
        hypo_sents = self.splitter(hypo)
        pre = [c for c in chunks for _ in hypo_sents]
        hyp = [h for _ in chunks for h in hypo_sents]
        reg, bin_, tri = self.inference(pre, hyp)
        score = {"nli_sp": tri[:, 0], "bin_sp": bin_, "reg_sp": reg}[self.mode]
        return score.view(len(chunks), len(hypo_sents)).max(dim=0).values.mean().item()

    def score(self, contexts, claims) -> list[float]:
        if self.mode.endswith("_sp"):
            return [self.per_example(c, h) for c, h in zip(contexts, claims)]
        reg, bin_, tri = self.inference(list(contexts), list(claims))
        return {"nli": tri[:, 0], "bin": bin_, "reg": reg}[self.mode].tolist()
