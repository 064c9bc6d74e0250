"""FillMask against transformers' FillMaskPipeline on tiny random *ForMaskedLM models of a WordPiece family (bert), a
byte-level BPE one (roberta), a Unigram one (xlm-roberta, its tokenizer cleaning up spaces on decoding), DeBERTa-v3
(Unigram, [MASK]) and ModernBERT (byte-level BPE, [MASK]): texts with accents, emoji, runs of spaces, words of many
pieces and two masks; default top_k, 1 and 12; targets in the vocabulary and not (a word of many pieces); a long
text cut: the same tokens, token strings and sequences, scores within 1e-5; a text's result the same whatever it is
batched with; the head run on the mask positions alone; bad input refused by name."""

import math
import re
import warnings

import pytest
import torch
from conftest import DEVICES
from family_builders import FAMILIES, hf_model, write_tokenizer

import minialign as ma
from minialign.runtime.engine import TruncationWarning
from minialign.text.tokenizer import Encoded

TEXTS = [
    "Paris is the {m} of France.",
    "Café naïve résumé: the {m} was 😀 great!",
    "  Several   spaces\tand {m}  between   words , then ! ",  # spaces before punctuation: cleaned up
    "The {m} and the {m} went to Zürich, Genève.",  # two masks: a list per mask
    "{m}",
    "supercalifragilisticexpialidocious {m} antidisestablishmentarianism.",
]
LONG = "{m} opened in 1889. " + "The tower was built in Paris and opened in 1889. " * 12
ARCHS = ["bert", "roberta", "xlm-roberta", "deberta-v2", "modernbert"]
# tokenizer_config.json's clean_up_tokenization_spaces (ModernBERT-base's has it: a BPE model, where transformers
# does not apply it)
CLEAN_UP = {"xlm-roberta", "bert", "modernbert"}


@pytest.fixture(scope="module", params=ARCHS)
def filler(request, tmp_path_factory, wordpiece_dir, bpe_dir):
    """(a transformers *ForMaskedLM directory of the family with its tokenizer; the model; its tokenizer), the word
    embeddings (the tied decoder) and the head's dense layer scaled so the probabilities are far from uniform and far
    apart, the layers' weights so a mask's candidates depend on its context (not on the mask's embedding alone)."""
    import json

    import transformers

    arch = request.param
    row = FAMILIES[arch]
    directory = tmp_path_factory.mktemp(f"mlm-{arch}")
    vocab = write_tokenizer(row, directory, wordpiece_dir=wordpiece_dir, bpe_dir=bpe_dir)
    if arch == "roberta":  # a tokenizer.json beside vocab.json + merges.txt, as roberta-base has: <mask> lstrip
        ma.Tokenizer.from_pretrained(directory).save(directory)
    if arch in CLEAN_UP:
        settings = json.loads((directory / "tokenizer_config.json").read_text())
        (directory / "tokenizer_config.json").write_text(json.dumps({**settings, "clean_up_tokenization_spaces": True}))
    model = hf_model(row, vocab, masked_lm=True)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(40)
        heads = [m for name, m in model.named_modules() if name.endswith("dense")
                 and not name.startswith(model.base_model_prefix + ".")]
        assert len(heads) == 1
        heads[0].weight.mul_(30)
        for name, p in model.named_parameters():
            if name.startswith(model.base_model_prefix + ".") and "embeddings" not in name and p.dim() == 2:
                p.mul_(8)
    model.save_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert tokenizer.is_fast and tokenizer.clean_up_tokenization_spaces == (arch in CLEAN_UP)
    return directory, model, tokenizer


@pytest.fixture(scope="module")
def ours(filler):
    return ma.FillMask.from_pretrained(filler[0], attn_backend="eager")


def _texts(filler, texts):
    return [text.format(m=filler[2].mask_token) for text in texts]


def _theirs(filler, texts, **kwargs):
    import transformers

    _, model, tokenizer = filler
    pipe = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
    return [pipe(text, **kwargs) for text in texts]  # one at a time, as a user calls it


def _plain(result):
    """A pipeline's result with plain Python values (numpy ints to int)."""
    if result and isinstance(result[0], list):
        return [_plain(row) for row in result]
    return [{k: float(v) if k == "score" else int(v) if k == "token" else v for k, v in c.items()} for c in result]


def _assert_same(mine, theirs) -> float:
    """Equal but for the scores, which are within 1e-5; returns their largest difference."""
    assert len(mine) == len(theirs)
    worst = 0.0
    for a, b in zip(mine, theirs, strict=True):
        b = _plain(b)
        rows_a, rows_b = (a, b) if a and isinstance(a[0], list) else ([a], [b])
        assert len(rows_a) == len(rows_b)
        for row_a, row_b in zip(rows_a, rows_b, strict=True):
            assert [list(c) for c in row_a] == [list(c) for c in row_b]  # the same keys, in the same order
            assert [{k: v for k, v in c.items() if k != "score"} for c in row_a] == \
                   [{k: v for k, v in c.items() if k != "score"} for c in row_b]
            for x, y in zip(row_a, row_b):
                assert type(x["score"]) is float and type(x["token"]) is int
                assert math.isclose(x["score"], y["score"], abs_tol=1e-5), (x, y)
                worst = max(worst, abs(x["score"] - y["score"]))
    return worst


@pytest.mark.parametrize("top_k", [None, 1, 12])
def test_matches_the_pipeline(filler, ours, top_k):
    texts = _texts(filler, TEXTS)
    options = {} if top_k is None else {"top_k": top_k}
    mine = ours.predict(texts, **options)
    theirs = _theirs(filler, texts, **options)
    _assert_same(mine, theirs)
    assert [len(c) for c in mine[0:1] + mine[3]] == [top_k or 5] * 3  # two masks: a list of candidates per mask
    rows = [c for c in mine if isinstance(c[0], dict)] + mine[3]
    if top_k != 1:
        assert len({tuple(x["token"] for x in c) for c in rows}) > 2  # the candidates vary with the text
    assert max(c[0]["score"] for c in rows) > 0.05  # far from uniform over the vocabulary
    assert ours.predict(texts[1], **options) == mine[1]  # one text: its result alone
    assert ours(texts[1], **options) == mine[1]  # called as the pipeline is
    if "xlm-roberta" in filler[0].name:  # its decoder leaves spaces before punctuation, which the clean-up takes out
        raw = ours.tokenizer.decode(ours.tokenizer.backend.encode(texts[2]).ids)
        assert ours.tokenizer.clean_up_tokenization_spaces and " ," in raw
        assert all(" ," not in c["sequence"] for c in mine[2])


def test_targets(filler, ours):
    tokenizer, backend = filler[2], ours.tokenizer.backend
    specials = set(backend.get_added_tokens_decoder())
    plain = [i for i in range(backend.get_vocab_size()) if i not in specials]
    words = [backend.id_to_token(plain[i]) for i in (5, len(plain) // 2, -3)]
    texts = _texts(filler, TEXTS[:4])
    words.insert(1, backend.id_to_token(ours.predict(texts[0])[0]["token"]))  # a likely one: scores far from 0
    assert all(word in tokenizer.get_vocab() for word in words)
    many = "antidisestablishmentarianism"
    assert many not in tokenizer.get_vocab() and len(backend.encode(many, add_special_tokens=False).ids) > 2
    for targets, top_k in [(words[1], 5), (words, 2), (words + [many, words[1]], 5), ([many], 1)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mine = ours.predict(texts, targets=targets, top_k=top_k)
            distinct = len(set(ours.target_ids(targets)))
        replaced = [str(w.message) for w in caught if "Replacing with" in str(w.message)]
        assert all(w.filename == __file__ for w in caught)  # reported at the caller's line
        assert len(replaced) == 2 * (many in targets)  # predict's warning, then target_ids'
        replaced = replaced[:1]
        if many in targets:
            first = backend.id_to_token(backend.encode(many, add_special_tokens=False).ids[0])
            assert replaced == [f"The specified target token `{many}` does not exist in the model vocabulary. "
                                f"Replacing with `{first}`."]
        _assert_same(mine, _theirs(filler, texts, targets=targets, top_k=top_k))
        assert len(mine[0]) == min(top_k, distinct)
        if words[1] in targets:
            assert mine[0][0]["token_str"].strip() and mine[0][0]["score"] > 0.01


def test_a_long_text_is_cut_as_the_pipeline_cuts_it_with_truncation(filler, ours):
    long, short = _texts(filler, [LONG, TEXTS[0]])
    assert len(ours.tokenizer.backend.encode(long).ids) > ours.max_length
    with pytest.warns(TruncationWarning, match="1 of 2 text"):
        mine = ours.predict([long, short])
    _assert_same(mine, _theirs(filler, [long, short], tokenizer_kwargs={"truncation": True}))
    with pytest.raises(ValueError, match=r"texts\[0\] has its .* tokens past the 64-token window only"):
        ours.predict([LONG.replace("{m}", "A") + filler[2].mask_token, short], warn_truncation=False)


def test_a_text_is_the_same_whatever_it_is_batched_with(filler, ours):
    texts = _texts(filler, TEXTS + [LONG])
    batched = ma.FillMask.from_pretrained(filler[0], batch_size=3)
    together = batched.predict(texts, top_k=8, warn_truncation=False)
    for text, result in zip(texts, together):
        assert batched.predict([text], top_k=8, warn_truncation=False) == [result]  # exact: scores bit for bit
    with torch.inference_mode():  # and the probabilities themselves
        encoded = batched.tokenizer.encode_ids(texts, max_length=batched.max_length)
        alone = [batched.engine.run_encoded(Encoded([ids], [types], [0]), batched.forward).values[0]
                 for ids, types in zip(encoded.ids, encoded.type_ids)]
        every = batched.engine.run_encoded(encoded, batched.forward).values
    assert all(torch.equal(a, b) for a, b in zip(alone, every))


def test_blocks_and_worker_processes_give_the_same_candidates(filler, ours, monkeypatch):
    """A call cut into blocks of texts (one mask's probabilities each here), or run by two worker processes, gives
    the same result."""
    if ours.model.config.arch != "bert":
        pytest.skip("one family is enough: the blocks and the workers run the same forward")
    import minialign.products.fill_mask as fill_mask

    texts = _texts(filler, TEXTS)
    expected = ours.predict(texts, top_k=3)
    monkeypatch.setattr(fill_mask, "BLOCK_BYTES", 4 * ours.model.config.vocab_size)
    assert ours._blocks([[1], [2, 3], [], [4]]) == [[0], [1], [2, 3]]  # a text of more masks alone
    assert ours.predict(texts, top_k=3) == expected
    monkeypatch.undo()
    pooled = ma.FillMask.from_pretrained(filler[0], attn_backend="eager", workers=2, batch_size=2)
    try:
        assert pooled.predict(texts, top_k=3) == expected
    finally:
        pooled.close()


def test_the_head_runs_on_the_masks_alone(filler, ours, monkeypatch):
    """The decoder multiplies the mask positions' states only: (masks, V) logits, never (tokens, V)."""
    texts = _texts(filler, TEXTS)
    rows = []
    decode = ours.model.mlm_head.decode
    monkeypatch.setattr(ours.model.mlm_head, "decode", lambda x, w: rows.append(x.shape[0]) or decode(x, w))
    ours.predict(texts)
    masks = sum(text.count(filler[2].mask_token) for text in texts)
    assert sum(rows) == masks == 7


@pytest.mark.parametrize("device", DEVICES[1:])  # CUDA where there is one (the CPU: every test above)
def test_on_cuda(filler, device):
    """fp32 on the GPU against the pipeline on the GPU (TF32 off: conftest's _deterministic)."""
    import copy

    import transformers

    directory, model, tokenizer = filler
    texts = _texts(filler, TEXTS)
    ours = ma.FillMask.from_pretrained(directory, device=device)
    pipe = transformers.pipeline("fill-mask", model=copy.deepcopy(model).to(device), tokenizer=tokenizer,
                                 device=device)
    _assert_same(ours.predict(texts, top_k=7), [pipe(text, top_k=7) for text in texts])


def test_mask_token(filler, ours):
    assert ours.mask_token == filler[2].mask_token
    assert ours.mask_token_id == filler[2].mask_token_id


def test_bad_input_is_refused(filler, ours):
    mask = ours.mask_token
    other = "<mask>" if mask == "[MASK]" else "[MASK]"
    with pytest.raises(ValueError, match=rf"texts\[1\] has no {re.escape(mask)} token: mark"):
        ours.predict([f"a {mask}.", "no mask here"])
    expected = (rf"texts\[2\] has no .* token: it writes the mask as '{re.escape(other)}', and this model's mask token "
                rf"is '{re.escape(mask)}'")
    with pytest.raises(ValueError, match=expected):
        ours.predict([f"a {mask}.", f"b {mask}", f"Paris is the {other} of France."])
    with pytest.raises(ValueError, match=r"texts\[0\] has no"):
        ours.predict([""])
    for top_k in (0, -1, True, 2.5, "5"):
        with pytest.raises(ValueError, match="top_k must be a positive integer"):
            ours.predict([f"a {mask}"], top_k=top_k)
    with pytest.raises(ValueError, match="At least one target"):
        ours.predict([f"a {mask}"], targets=[])
    with pytest.warns(UserWarning, match="ignoring it"), pytest.raises(ValueError, match="At least one target"):
        ours.predict([f"a {mask}"], targets=[""])
    with pytest.raises(ValueError, match="targets must be a string or a sequence of strings"):
        ours.predict([f"a {mask}"], targets=[3])
    with pytest.raises(ValueError, match="texts is empty"):
        ours.predict([])
    with pytest.raises(ValueError, match=r"texts\[1\] is int, not a string"):
        ours.predict([f"a {mask}", 3])
    assert ours.check(f"a {mask}") is None
    assert "has no" in ours.check("a") and ours.check(None, null="null") == "is null"
    long = LONG.replace("{m}", "A")
    assert ours.check(f"{long} {mask}") == f"has its {mask} tokens past the 64-token window only"  # as predict says
    assert ours.check(f"{mask} {long}") is None  # cut, its mask kept


def test_options_are_refused_by_name(ours):
    """check_options (and settings, predict): an OptionError naming top_k or targets, before any text is read; the
    targets resolved without warnings there (predict warns)."""
    from minialign.products.runner import OptionError

    for options, option, problem in [({"top_k": 0}, "top_k", "must be a positive integer, got 0"),
                                     ({"top_k": True}, "top_k", "must be a positive integer, got True"),
                                     ({"targets": []}, "targets", "has no token of the vocabulary ([])"),
                                     ({"targets": [3]}, "targets", "must be a string or a sequence of strings")]:
        for call in (ours.check_options, ours.settings):
            with pytest.raises(OptionError) as refused:
                call(**options)
            assert refused.value.option == option and refused.value.problem.startswith(problem), refused.value
    with pytest.raises(OptionError, match="^top_k must be"):
        ours.predict([f"a {ours.mask_token}"], top_k=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: a word the vocabulary lacks is resolved silently here
        ids = ours.check_options(targets=["supercalifragilisticexpialidocious"])
    assert ids == [ours.tokenizer.backend.encode("supercalifragilisticexpialidocious", add_special_tokens=False).ids[0]]
    assert ours.check_options() is None


def test_roberta_vocab_files_alone_keep_the_space_before_the_mask(bpe_dir):
    """Where a RoBERTa tokenizer is vocab.json + merges.txt alone, minialign's <mask> takes the space before it
    (lstrip, as transformers 4's RobertaTokenizerFast built it and roberta-base's tokenizer.json has it); transformers
    5's RobertaTokenizer builds it without, so its ids differ there (a separate "Ġ" before the mask)."""
    import transformers

    text = "Paris is the <mask> of France."
    backend = ma.Tokenizer.from_pretrained(bpe_dir).backend
    ours = [backend.id_to_token(i) for i in backend.encode(text).ids]
    reference = transformers.AutoTokenizer.from_pretrained(str(bpe_dir), tokenizer_type="roberta")
    theirs = reference.convert_ids_to_tokens(reference(text)["input_ids"])
    assert ours[ours.index("<mask>") - 1] == "e" and theirs[theirs.index("<mask>") - 1] == "Ġ"
    assert [t for t in theirs if t != "Ġ"] == [t for t in ours if t != "Ġ"]


def test_a_checkpoint_without_a_masked_lm_head_is_refused(tiny_family):
    directory, _ = tiny_family.hf("bert")
    with pytest.raises(ma.CheckpointError, match="ForMaskedLM"):
        ma.FillMask.from_pretrained(directory)


def test_settings(filler, ours):
    assert ours.settings(top_k=3, targets="x") == {"dtype": "float32", "max_length": 64, "top_k": 3, "targets": ["x"]}
