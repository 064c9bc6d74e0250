"""SentenceEncoder.encode_late_chunks against a reference built from other code: transformers' tokenizer offsets for a
span's tokens, sentence-transformers' token embeddings (a document within the window) or transformers' model over
each window's ids (a document three windows long, its token states chosen by the rule products/token_spans.py
states, written here again in plain Python), then sentence-transformers' own Pooling, Dense and Normalize modules
over each span's tokens."""

import warnings

import pytest
import torch
from test_embedding import tiny_st_dir

import minialign as ma

SENTENCES = ["Berlin is the capital of Germany.", "It has about four million people.", "Le café est très bon.",
             "The city is also a state of its own.", "Unicode: 東京 😀 naïve."]
SHORT = ["Paris is big.", "It is old."]  # within the window of 24 tokens, with both tokenizers


def document_and_spans(sentences):
    """The sentences joined by a space, and each one's character range."""
    spans, at = [], 0
    for sentence in sentences:
        spans.append((at, at + len(sentence)))
        at += len(sentence) + 1
    return " ".join(sentences), spans


@pytest.fixture(scope="module", params=["bert", "roberta"])
def model(request, tmp_path_factory, minilm_dir, bpe_dir):
    """(SentenceEncoder, SentenceTransformer, transformers tokenizer, transformers model) of one tiny directory: mean
    pooling, a Dense, Normalize; a window of 24 tokens."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    arch = request.param
    directory, base = tiny_st_dir(tmp_path_factory.mktemp(arch), arch, minilm_dir if arch == "bert" else bpe_dir,
                                  "mean", dense=True, normalize=True)
    return (ma.SentenceEncoder.from_pretrained(directory), SentenceTransformer(str(directory), device="cpu"),
            AutoTokenizer.from_pretrained(str(base)), AutoModel.from_pretrained(str(base)).eval())


def span_masks(tokenizer, text, spans, shift=0):
    """(S, L) long: the tokens whose character range overlaps each span (an empty range counting at its start), never
    a special token, by transformers' offsets."""
    encoded = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    masks = torch.zeros(len(spans), len(encoded["input_ids"]), dtype=torch.long)
    for s, (a, b) in enumerate(spans):
        for t, ((start, end), special) in enumerate(zip(encoded["offset_mapping"], encoded["special_tokens_mask"])):
            masks[s, t] = int(not special and start < b + shift and max(end, start + 1) > a + shift)
    return masks, encoded["input_ids"]


def pooled(reference, states, masks):
    """sentence-transformers' modules after its Transformer, over (L, C) token states, one row per span mask."""
    features = {"token_embeddings": states[None].expand(len(masks), -1, -1).clone(), "attention_mask": masks}
    for module in list(reference)[1:]:
        features = module(features)
    return features["sentence_embedding"]


def test_late_chunks_equal_pooling_over_each_spans_tokens(model):
    ours, reference, tokenizer, _ = model
    document, spans = document_and_spans(SHORT)
    masks, ids = span_masks(tokenizer, document, spans)
    assert len(ids) <= ours.max_seq_length  # one forward
    states = reference.encode(document, output_value="token_embeddings")
    got = ours.encode_late_chunks(document, spans)
    assert got.shape == (2, ours.dimension) and got.dtype == torch.float32
    assert (got - pooled(reference, states, masks)).abs().max() <= 1e-5
    # not the chunks embedded alone: each chunk's tokens read the whole document
    alone = ours.encode([document[a:b] for a, b in spans])
    assert (got - alone).abs().max() > 1e-3
    # spans that cut words: a token straddling a span's edge belongs to it; spans may overlap
    cuts = [(3, 9), (0, len(document)), (5, 18)]
    masks, _ = span_masks(tokenizer, document, cuts)
    assert (ours.encode_late_chunks(document, cuts) - pooled(reference, states, masks)).abs().max() <= 1e-5


def test_late_chunks_with_a_prompt(model):
    ours, reference, tokenizer, _ = model
    document, spans = "Paris is big.", [(0, 5), (6, 13)]
    prompt = "doc: "
    masks, ids = span_masks(tokenizer, prompt + document, spans, shift=len(prompt))
    assert len(ids) <= ours.max_seq_length and masks[:, :2].sum() == 0  # one forward; the prompt in no span
    states = reference.encode(document, prompt=prompt, output_value="token_embeddings")
    got = ours.encode_late_chunks(document, spans, prompt=prompt)
    assert (got - pooled(reference, states, masks)).abs().max() <= 1e-5


def test_a_document_three_windows_long_runs_in_overlapping_windows(model):
    ours, reference, tokenizer, hf = model
    document, spans = document_and_spans(SENTENCES * 2)
    masks, ids = span_masks(tokenizer, document, spans)
    window = ours.max_seq_length
    assert len(ids) > 3 * window  # the document is cut into windows, never silently at the window
    # BERT's and RoBERTa's templates: one special token before, one after; an odd overlap: some tokens tie
    n, room, overlap = len(ids) - 2, window - 2, 7
    starts = list(range(0, n, room - overlap))
    starts = starts[:next(k for k, s in enumerate(starts) if s + room >= n) + 1]
    with torch.no_grad():
        outs = [hf(input_ids=torch.tensor([[ids[0], *ids[1 + s:1 + min(s + room, n)], ids[-1]]])).last_hidden_state[0]
                for s in starts]
    body = []
    for p in range(n):  # the state of the window where the token is farthest from a cut, the earlier on a tie
        def distance(k):
            s, e = starts[k], min(starts[k] + room, n)
            return min(p - s if s > 0 else n, e - 1 - p if e < n else n)
        inside = [k for k, s in enumerate(starts) if s <= p < min(s + room, n)]
        k = max(inside, key=lambda k: (distance(k), -k))
        body.append(outs[k][1 + p - starts[k]])
    states = torch.cat([outs[0][:1], torch.stack(body), outs[-1][-1:]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no truncation warning: nothing is cut
        got = ours.encode_late_chunks(document, spans, overlap=overlap)
    assert got.shape == (len(spans), ours.dimension)
    assert (got - pooled(reference, states, masks)).abs().max() <= 1e-5
    # a text's late chunks are the same bits whatever the batches its windows run in
    assert torch.equal(ours.encode_late_chunks(document, spans, overlap=overlap, batch_size=1), got)
    assert torch.equal(torch.cat([ours.encode_late_chunks(document, [span], overlap=overlap) for span in spans]), got)
    default = ours.encode_late_chunks(document, spans)  # a quarter of the room: another overlap, other states
    assert default.shape == got.shape and (default - got).abs().max() > 0


def test_cls_pooling_takes_each_spans_first_token(tmp_path, minilm_dir):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    directory, base = tiny_st_dir(tmp_path, "bert", minilm_dir, "cls")
    ours, reference = ma.SentenceEncoder.from_pretrained(directory), SentenceTransformer(str(directory), device="cpu")
    document, spans = document_and_spans(SHORT)
    masks, _ = span_masks(AutoTokenizer.from_pretrained(str(base)), document, spans)
    states = reference.encode(document, output_value="token_embeddings")
    first = masks.argmax(dim=1)
    assert (ours.encode_late_chunks(document, spans) - states[first]).abs().max() <= 1e-5


def test_bad_input_is_refused_before_the_model_runs(model, monkeypatch):
    ours = model[0]
    document, spans = document_and_spans(SHORT)
    monkeypatch.setattr(ours.encoder, "forward", lambda *a, **k: pytest.fail("model ran"))
    for bad, match in (((0, len(document) + 1),), r"spans\[0\] must be \(start, end\) ints"), \
                      (((5, 5),), r"spans\[0\]"), ((("a", 3),), r"spans\[0\]"), ("03", "spans must be a sequence"), \
                      (((0, 3), (13, 14)), r"spans\[1\] \(13, 14\) holds no token"):
        with pytest.raises(ValueError, match=match):
            ours.encode_late_chunks(document, list(bad) if not isinstance(bad, str) else bad)
    with pytest.raises(ValueError, match="document must be a string"):
        ours.encode_late_chunks(None, spans)
    with pytest.raises(ValueError, match=r"document holds a lone surrogate"):
        ours.encode_late_chunks("\udc80 text", [(0, 2)])
    long, long_spans = document_and_spans(SENTENCES * 2)
    for overlap in (-1, 22, 1.5):  # the room: 24 less 2 special tokens
        for text, where in ((long, long_spans), (document, spans)):  # checked where the document fits too
            with pytest.raises(ValueError, match=r"overlap must be an int in \[0, 22\)"):
                ours.encode_late_chunks(text, where, overlap=overlap)


def _windowed_reference(hf, ids, lead, window, overlap, *, causal=False):
    """The token states of `ids` (one special token trailing, `lead` tokens leading: the special one and a prompt's)
    run as windows that each repeat the leading tokens, by the rule products/token_spans.py states, in plain Python."""
    n, room = len(ids) - lead - 1, window - lead - 1
    starts = list(range(0, n, room - overlap))
    starts = starts[:next(k for k, s in enumerate(starts) if s + room >= n) + 1]
    with torch.no_grad():
        outs = [hf(input_ids=torch.tensor([[*ids[:lead], *ids[lead + s:lead + min(s + room, n)], ids[-1]]]))
                .last_hidden_state[0] for s in starts]
    body = []
    for p in range(n):
        def distance(k):
            s, e = starts[k], min(starts[k] + room, n)
            return min(p - s if s > 0 else n, e - 1 - p if e < n and not causal else n)
        inside = [k for k, s in enumerate(starts) if s <= p < min(s + room, n)]
        k = max(inside, key=lambda k: (distance(k), -k))
        body.append(outs[k][lead + p - starts[k]])
    return torch.cat([outs[0][:lead], torch.stack(body), outs[-1][-1:]]), len(starts)


def test_a_prompt_leads_every_window(model):
    """Past the window, the prompt's tokens lead each window as the special tokens do (every window is prompt, then
    text), their states the first window's; they belong to no span."""
    ours, reference, tokenizer, hf = model
    document, spans = document_and_spans(SENTENCES * 2)
    prompt = "doc: "
    masks, ids = span_masks(tokenizer, prompt + document, spans, shift=len(prompt))
    offsets = tokenizer(prompt + document, return_offsets_mapping=True)["offset_mapping"]
    lead = 1 + next(i for i, (start, end) in enumerate(offsets[1:]) if start >= len(prompt) or end > len(prompt))
    assert lead >= 2 and masks[:, :lead].sum() == 0
    states, count = _windowed_reference(hf, ids, lead, ours.max_seq_length, 5)
    assert count >= 3
    got = ours.encode_late_chunks(document, spans, prompt=prompt, overlap=5)
    assert (got - pooled(reference, states, masks)).abs().max() <= 1e-5


def test_a_causal_model_takes_each_token_from_the_earliest_window(tmp_path):
    """A causal model's token reads only what precedes it: its state is the earliest window's holding it (the most
    context before it), never a later window's where a cut sits before it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
    from test_qwen import qwen3_embedding_dir
    from transformers import AutoModel, AutoTokenizer

    _, directory = qwen3_embedding_dir(tmp_path)
    ours = ma.SentenceEncoder.from_pretrained(directory)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "base"))
    hf = AutoModel.from_pretrained(str(tmp_path / "base")).eval()
    document, spans = document_and_spans(SENTENCES)
    masks, ids = span_masks(tokenizer, document, spans)
    assert tokenizer.convert_ids_to_tokens(ids[-1]) == "<|end_of_text|>" and len(ids) > 2 * ours.max_seq_length
    # no leading special token: lead 0; ids[-1] the appended end-of-text
    states, count = _windowed_reference(hf, ids, 0, ours.max_seq_length, 6, causal=True)
    got = ours.encode_late_chunks(document, spans, overlap=6)
    last = [int(torch.nonzero(m).max()) for m in masks]  # lasttoken pooling over each span's tokens
    expected = torch.nn.functional.normalize(torch.stack([states[i] for i in last]), dim=-1)
    assert count >= 3 and (got - expected).abs().max() <= 1e-5
    bidirectional = ma.products.token_spans.owners(36, [0, 10, 20], 16)[0]
    causal = ma.products.token_spans.owners(36, [0, 10, 20], 16, causal=True)[0]
    assert causal.tolist() == [0] * 16 + [1] * 10 + [2] * 10
    assert bidirectional.tolist() == [0] * 13 + [1] * 10 + [2] * 13
