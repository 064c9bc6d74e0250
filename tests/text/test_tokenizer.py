"""Tokenizer ids equal transformers' on the same files; truncation and padding rules."""

import itertools
import subprocess
import sys

import pytest
import torch
import transformers

import minialign as ma

TEXTS = ["The Eiffel Tower was built in Paris.", "", "Unicode: café naïve 東京 😀 — “quotes”",
         "Numbers 3.14 and $5,000 on 2023-01-02.", "a " * 40]
PAIRS = ["It is in Paris.", "Empty first text.", "Second 😀.", "claim", "short"]


def _reference(directory, **kw):
    return transformers.AutoTokenizer.from_pretrained(directory, **kw)


def _assert_same(ours, theirs, keys=("input_ids", "attention_mask")):
    for key in keys:
        assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.parametrize("max_length", [512, 12])
def test_minilm_tokenizer_json_matches_transformers(minilm_dir, max_length):
    ours = ma.Tokenizer.from_pretrained(minilm_dir)
    theirs = _reference(minilm_dir)
    _assert_same(ours(TEXTS, max_length=max_length),
                 theirs(TEXTS, padding="longest", truncation=True, max_length=max_length, return_tensors="pt"))
    _assert_same(ours(TEXTS, PAIRS, max_length=max_length),
                 theirs(TEXTS, PAIRS, padding="longest", truncation="only_first", max_length=max_length,
                        return_tensors="pt"), keys=("input_ids", "attention_mask", "token_type_ids"))


def test_minilm_ignores_padding_baked_into_tokenizer_json(minilm_dir):
    # all-MiniLM-L6-v2's tokenizer.json pads every input to 128; we pad to the longest
    batch = ma.Tokenizer.from_pretrained(minilm_dir)(["short text"])
    assert batch["input_ids"].shape == (1, 4)


def test_vocab_txt_wordpiece_matches_transformers(minilm_dir, tmp_path):
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (tmp_path / name).write_bytes((minilm_dir / name).read_bytes())
    ours = ma.Tokenizer.from_pretrained(tmp_path)
    theirs = _reference(tmp_path)
    got = ours(TEXTS, PAIRS)
    _assert_same(got, theirs(TEXTS, PAIRS, padding="longest", truncation="only_first", max_length=512,
                             return_tensors="pt"), keys=("input_ids", "attention_mask", "token_type_ids"))
    pair = ours("a b", "c")
    assert pair["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1]]  # [CLS] a b [SEP] c [SEP]


@pytest.mark.parametrize("fixture", ["bpe_dir", "bpe_json_dir"])
def test_byte_level_bpe_matches_transformers(fixture, request):
    directory = request.getfixturevalue(fixture)
    ours = ma.Tokenizer.from_pretrained(directory)
    theirs = transformers.AutoTokenizer.from_pretrained(request.getfixturevalue("bpe_dir"), tokenizer_type="roberta")
    _assert_same(ours(TEXTS, PAIRS), theirs(TEXTS, PAIRS, padding="longest", truncation="only_first",
                                            return_tensors="pt"))
    short = ours(TEXTS, PAIRS, max_length=16)
    for i, (a, b) in enumerate(zip(TEXTS, PAIRS)):
        try:
            expected = theirs(a, b, truncation="only_first", max_length=16)["input_ids"]
        except Exception:  # the pair's second text alone does not fit: longest-first for this pair
            expected = theirs(a, b, truncation="longest_first", max_length=16)["input_ids"]
        n = int(short["attention_mask"][i].sum())
        assert short["input_ids"][i, :n].tolist() == expected
        assert (short["input_ids"][i, n:] == ours.pad_token_id).all()
    batch = ours("hello world", "the claim")
    s, e = theirs.convert_tokens_to_ids(["<s>", "</s>"])
    ids = batch["input_ids"][0].tolist()
    assert ids[0] == s and ids[-1] == e and ids.count(e) == 3  # <s> A </s></s> B </s>
    assert "token_type_ids" not in batch


def test_pair_falls_back_to_longest_first_only_for_that_pair(minilm_dir):
    ours = ma.Tokenizer.from_pretrained(minilm_dir)
    theirs = _reference(minilm_dir)
    long_claim = "word " * 30
    batch = ours(["context one two three four five six seven", "context"], ["claim", long_claim], max_length=16)
    only_first = theirs("context one two three four five six seven", "claim", truncation="only_first", max_length=16)
    longest = theirs("context", long_claim, truncation="longest_first", max_length=16)
    assert batch["input_ids"][0, : len(only_first["input_ids"])].tolist() == only_first["input_ids"]
    assert batch["input_ids"][1].tolist() == longest["input_ids"]
    assert batch["input_ids"].shape[1] == 16


def test_bad_text_inputs(minilm_dir):
    tok = ma.Tokenizer.from_pretrained(minilm_dir)
    with pytest.raises(TypeError, match=r"index \[1\]"):
        tok(["ok", None])
    with pytest.raises(TypeError, match=r"index \[0, 2\]"):
        tok(["a", "b", "c"], [3, "x", b"y"])
    with pytest.raises(ValueError, match="text has 2 items but text_pair has 1"):
        tok(["a", "b"], ["c"])
    with pytest.raises(FileNotFoundError):
        ma.Tokenizer.from_pretrained("./does/not/exist")


def test_long_text_truncated_to_window(minilm_dir):
    tok = ma.Tokenizer.from_pretrained(minilm_dir)
    batch = tok(["word " * 2000])
    assert batch["input_ids"].shape == (1, 512)
    enc = ma.Encoder.from_pretrained(minilm_dir)
    with torch.no_grad():
        assert enc(**batch).last_hidden_state.shape == (1, 512, 384)


@pytest.mark.parametrize("which", ["minilm", "bpe", "bpe_json"])
def test_encode_ids_equals_encode_and_counts_the_cut(which, request):
    """encode_ids (each distinct text tokenized once, ids assembled by the post-processor's layout)
    gives encode's ids and type ids exactly, at every overflow including the boundary where the
    first text would be cut to nothing (then longest-first), and says how many tokens were cut."""
    directory = request.getfixturevalue({"minilm": "minilm_dir", "bpe": "bpe_dir", "bpe_json": "bpe_json_dir"}[which])
    tok = ma.Tokenizer.from_pretrained(directory)
    words = "the claim tower paris café 東京 said minister".split()
    firsts = [" ".join(words[(i + j) % len(words)] for j in range(n)) for i, n in enumerate(range(0, 14))]
    seconds = [" ".join(words[(2 * i + j) % len(words)] for j in range(n)) for i, n in enumerate(range(13, -1, -1))]
    for max_length in (8, 11, 16, 40):
        for (texts, pairs), truncation in itertools.product(((firsts, seconds), (seconds, firsts), (firsts, None)),
                                                            ("only_first", "longest_first")):
            reference = tok.encode(texts, pairs, max_length=max_length, truncation=truncation)
            got = tok.encode_ids(texts, pairs, max_length=max_length, truncation=truncation)
            assert got.ids == [e.ids for e in reference] and got.type_ids == [e.type_ids for e in reference]
            full = tok.encode(texts, pairs, max_length=10_000)
            assert got.truncated == [len(f.ids) - len(r.ids) for f, r in zip(full, reference)]


def test_pair_lengths_is_tokenizers_rule():
    """pair_lengths gives the lengths `tokenizers` keeps for every small case of both strategies
    (only_first falling back to longest-first where the first text cannot absorb the overflow)."""
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers

    backend = HFTokenizer(models.WordLevel({"x": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    for n_a, n_b, budget in itertools.product(range(0, 9), range(0, 9), range(1, 12)):
        for truncation in ma.text.tokenizer.TRUNCATIONS:
            backend.enable_truncation(budget, strategy=truncation)
            try:
                e = backend.encode("x " * n_a, "x " * n_b)
            except Exception:  # only_first cannot: longest-first, as Tokenizer.encode does
                backend.enable_truncation(budget, strategy="longest_first")
                e = backend.encode("x " * n_a, "x " * n_b)
            kept = (e.sequence_ids.count(0), e.sequence_ids.count(1))
            assert ma.text.tokenizer.pair_lengths(n_a, n_b, budget, truncation) == kept, (n_a, n_b, budget, truncation)


def test_a_long_pair_takes_memory_linear_in_its_length(minilm_dir):
    """`tokenizers` cutting a pair builds every overflowing piece of both texts (quadratic:
    40,000 characters took 2.6 GB and 5 s, 200,000 were killed at 24 GB). encode_ids cuts on token
    counts: a 200,000-character pair, both strategies, in a fresh process, stays near the interpreter's
    own footprint."""
    code = f"""
import resource, minialign as ma
tok = ma.Tokenizer.from_pretrained({str(minilm_dir)!r})
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = ("lorem ipsum dolor sit amet. " * 8000)[:200_000]
for truncation in ("only_first", "longest_first"):
    e = tok.encode_ids([t], [t], max_length=512, truncation=truncation)
    assert len(e.ids[0]) == 512 and e.truncated[0] > 100_000, e.truncated
batch = tok([t], [t])
assert batch["input_ids"].shape == (1, 512)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 300  # MB over the loaded tokenizer (the old path: tens of GB)


def test_unencodable_text_is_named(minilm_dir):
    tok = ma.Tokenizer.from_pretrained(minilm_dir)
    with pytest.raises(ValueError, match=r"text\[1\] holds a lone surrogate \(U\+D83D at character 2\)"):
        tok(["fine", "ok\ud83d"])
    assert tok(["NUL \x00 and bell \x07 are dropped"])["input_ids"].shape[0] == 1  # encodable: taken


def test_a_max_length_without_room_for_text_is_refused(minilm_dir):
    tok = ma.Tokenizer.from_pretrained(minilm_dir)
    for call in (lambda: tok.encode_ids(["a b"], ["c d"], max_length=3, truncation="longest_first"),
                 lambda: tok(["a b"], max_length=2)):
        with pytest.raises(ValueError, match="leaves no room for text"):
            call()


def test_a_sentencepiece_model_without_tokenizer_json_is_named(tmp_path):
    """DeBERTa-v3 checkpoints may ship spm.model alone: the error names it and says how to get a tokenizer.json."""
    (tmp_path / "spm.model").write_bytes(b"\x0a\x00")
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    with pytest.raises(FileNotFoundError, match=r"SentencePiece model \(spm.model\) without tokenizer.json.*"
                                                r"save_pretrained"):
        ma.Tokenizer.from_dir(tmp_path)


@pytest.mark.parametrize("fixture", ["minilm_dir", "bpe_dir"])
def test_special_tokens_by_role_as_transformers_names_them(fixture, request):
    """special_tokens: the roles the files name (transformers' special_tokens_map), the pad token always;
    start_token / end_token: what the post-processor puts around one text."""
    directory = request.getfixturevalue(fixture)
    ours = ma.Tokenizer.from_pretrained(directory)
    theirs = transformers.AutoTokenizer.from_pretrained(directory, **({"tokenizer_type": "roberta"}
                                                                    if fixture == "bpe_dir" else {}))
    assert ours.special_tokens["pad_token"] == ours.pad_token == theirs.pad_token
    for role, token in ours.special_tokens.items():
        assert token == str(getattr(theirs, role)), role
    assert (ours.start_token, ours.end_token) == (theirs.cls_token, theirs.sep_token)
    assert ma.Tokenizer(ours.backend, pad_token=ours.pad_token).special_tokens == {"pad_token": ours.pad_token}


@pytest.mark.parametrize("fixture", ["minilm_dir", "bpe_dir"])
def test_pair_windows_are_transformers_overflowing_windows(fixture, request):
    """encode_pair_windows: the first text whole in each window, the second in windows overlapping by the stride, as
    transformers' tokenizer(first, second, truncation="only_second", stride=, return_overflowing_tokens=True) makes
    them (ids, types, offsets); a pair that fits is one window; a stride that leaves no room is refused."""
    directory = request.getfixturevalue(fixture)
    ours = ma.Tokenizer.from_pretrained(directory)
    theirs = _reference(directory, **({"tokenizer_type": "roberta"} if fixture == "bpe_dir" else {}))
    first, second = "Where was the tower built?", " ".join(TEXTS + PAIRS) * 3
    windows = ours.encode_pair_windows(first, second, max_length=32, stride=5)
    reference = theirs(first, second, truncation="only_second", max_length=32, stride=5,
                       return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    assert len(windows) == len(reference["input_ids"]) > 3
    for window, ids, types, offsets in zip(windows, reference["input_ids"], reference["token_type_ids"],
                                           reference["offset_mapping"]):
        assert (window.ids, window.type_ids, [tuple(o) for o in window.offsets]) == (ids, types,
                                                                                     [tuple(o) for o in offsets])
    assert len(ours.encode_pair_windows(first, "Paris.", max_length=32, stride=31)) == 1  # fits: any stride
    room = 32 - ours.backend.num_special_tokens_to_add(True) - len(theirs.tokenize(first))
    with pytest.raises(ValueError, match=rf"leave {room} tokens .* the stride \({room}\) must be below {room}"):
        ours.encode_pair_windows(first, second, max_length=32, stride=room)
    with pytest.raises(ValueError, match="leaving no room for the second text"):
        ours.encode_pair_windows(" ".join(["tower"] * 40), second, max_length=32, stride=0)
