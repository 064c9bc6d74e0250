"""`ma.capture` on every family beyond BERT and RoBERTa (tests/family_builders.py): it records the
embedding parts the family has and no other (no token_type for DistilBERT and MPNet, ELECTRA's
projection), the parts sum to what the LayerNorm reads, each layer's output and attention probabilities
are transformers' hidden states and attentions, and capturing changes no result."""

import pytest
import torch
from family_builders import FAMILIES, LONG_CONTEXT, NEW, family_params

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)
PRE_LN = ("modernbert", "eurobert")  # the pre-LN families: a norm before each block and a final norm
NO_EMBEDDING_NORM = ("eurobert",)  # Llama's bare token embeddings: the first layer reads their sum
TEXTS = ["The tower was built in Paris.", "La tour a été construite à Paris en 1889, dit le ministre."]
PAIRS = ["It opened in 1889.", "Short."]


@pytest.mark.parametrize("family", family_params(NEW + list(LONG_CONTEXT), long_context=True))
def test_capture_records_the_parts_the_family_has(family, tiny_family):
    row = FAMILIES[family]
    directory, hf = tiny_family.hf(family)
    model = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    batch = ma.Tokenizer.from_pretrained(directory)(TEXTS, PAIRS)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        plain = model(**batch)
        with ma.capture(model) as cap:
            out = model(**batch)
        theirs = hf(**{k: v for k, v in batch.items() if k != "token_type_ids" or row.token_types},
                    output_hidden_states=True, output_attentions=True)
    assert torch.equal(out.last_hidden_state, plain.last_hidden_state)  # a capture changes no result

    parts = [p for p in ("word", "position", "token_type") if f"embeddings.{p}" in cap]
    assert parts == ["word", *(["position"] if row.positions else []), *(["token_type"] if row.token_types else [])]
    width = row.fields.get("embedding_size", model.config.hidden_size)
    assert cap["embeddings.word"].shape == (*batch["input_ids"].shape, width)
    total = sum(cap[f"embeddings.{p}"] for p in parts)
    torch.testing.assert_close(cap["embeddings.sum"], total, **TOL)
    if family in NO_EMBEDDING_NORM:
        assert "embeddings.norm" not in cap
    else:
        torch.testing.assert_close(model.embeddings.norm(cap["embeddings.sum"]), cap["embeddings.norm"], **TOL)
    assert ("embeddings.project" in cap) == row.projected
    first = cap["embeddings.project" if row.projected else "embeddings.sum" if family in NO_EMBEDDING_NORM
                else "embeddings.norm"]  # what the first layer reads
    assert torch.equal(first, cap["layers.0.input"])
    torch.testing.assert_close(first[real], theirs.hidden_states[0][real], **TOL)

    last = model.config.num_layers - 1
    for i in range(model.config.num_layers):
        state = cap[f"layers.{i}.output"]
        if i == last and "final_norm" in cap:  # transformers' last hidden state is the finished one (a final norm)
            torch.testing.assert_close(cap["final_norm"], model.final_norm(state), **TOL)
            state = cap["final_norm"]
        torch.testing.assert_close(state[real], theirs.hidden_states[i + 1][real], **TOL)
        if f"layers.{i}.ffn_norm" in cap:  # a pre-LN layer: each norm's output is what its block reads
            layer = model.layers[i]
            torch.testing.assert_close(cap[f"layers.{i}.attention_norm"], layer.attention_norm(cap[f"layers.{i}.input"]),
                                       **TOL)
            torch.testing.assert_close(cap[f"layers.{i}.ffn_norm"],
                                       layer.ffn_norm(cap[f"layers.{i}.attention_residual"]), **TOL)
        probs = cap[f"layers.{i}.attention.probs"]  # (B, H, L, L): real query rows
        torch.testing.assert_close(probs.transpose(1, 2)[real], theirs.attentions[i].transpose(1, 2)[real], **TOL)
    assert ("relative_position_bias.by_offset" in cap) == row.relative_bias
    assert ("final_norm" in cap) == ("layers.0.ffn_norm" in cap) == (family in PRE_LN)
