"""Classifier on causal LM CrossEncoders (a Transformer with transformer_task "text-generation", then LogitScore:
Qwen3-Reranker's and mxbai-rerank-v2's layout) against sentence-transformers' CrossEncoder.predict / rank on tiny
random Qwen3ForCausalLM / Qwen2ForCausalLM saved by sentence-transformers itself: pairs rendered by a Qwen3-Reranker
shaped chat template (query and document messages, the prompt a system message), or read as text pairs without
one; cut rows with the template's tail written back; the two vocabulary rows read, never the whole projection."""

import json
import shutil
import warnings

import pytest
import torch
import transformers
from conftest import reference_model
from family_builders import LLAMA3_SPLIT, UNIGRAM_CORPUS

import minialign as ma
from minialign.runtime.engine import TruncationWarning
from minialign.apps.cli import main as cli
from minialign.text.chat_template import ChatTemplate, read_chat_template

TOL = dict(atol=1e-5, rtol=0)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen3-Reranker's prompt (its model card's format_instruction), laid out as a template reading sentence-transformers'
# "query" / "document" roles, a system message the instruction
TEMPLATE = """{%- set instruction = namespace(text="Given a query, find the passage") -%}
{%- for message in messages -%}{%- if message.role == "system" -%}{%- set instruction.text = message.content -%}
{%- endif -%}{%- endfor -%}
<|im_start|>system
Judge whether the Document meets the Query. Answer "yes" or "no".<|im_end|>
<|im_start|>user
<Instruct>: {{ instruction.text }}
{%- for message in messages -%}
{%- if message.role == "query" %}

<Query>: {{ message.content }}
{%- elif message.role == "document" %}

<Document>: {{ message.content }}
{%- elif message.role == "user" %}

{{ message.content }}
{%- endif -%}
{%- endfor -%}<|im_end|>
<|im_start|>assistant
<think>

</think>

"""
PAIRS = [("What is the tower?", "The tower was built in Paris and opened in 1889."), ("yes", "no"),
         ("Unicode: café naïve 東京 😀", "Numbers 3.14 and $5,000."), ("", "An empty query."),
         ("tower", "The minister said the tower opened in Paris. " * 12)]  # the last one is cut by the window
WINDOW = 200


def qwen_tokenizer(directory, *, template: str | None = TEMPLATE):
    """A byte-level BPE laid out as Qwen's (Llama 3's split, ByteLevel, no special tokens added around text; its
    ChatML tokens special), "yes" and "no" single tokens (CrossEncoder's default LogitScore tokens), padding on the
    left as Qwen3-Reranker's tokenizer_config.json says."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(list(UNIGRAM_CORPUS) + ["yes", "no"] * 50, trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert tok.token_to_id("yes") is not None and tok.token_to_id("no") is not None
    directory.mkdir(parents=True)
    tok.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "padding_side": "left", "model_max_length": 512}
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, **({"chat_template": template}
                                                                             if template else {})}))
    return tok.get_vocab_size()


def save_reranker(root, arch="qwen3", *, tied=False, template: str | None = TEMPLATE):
    """A CrossEncoder over a tiny random *ForCausalLM, as sentence-transformers builds one from a causal LM
    directory (Transformer "text-generation" + LogitScore of "yes" and "no") and saves it."""
    from sentence_transformers import CrossEncoder

    base = root / f"{arch}-lm"
    vocab = qwen_tokenizer(base, template=template)
    sizes = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=37, max_position_embeddings=256, tie_word_embeddings=tied,
                 rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    if arch == "qwen3":
        config, cls = transformers.Qwen3Config(**sizes, head_dim=16), transformers.Qwen3ForCausalLM
    else:
        config, cls = transformers.Qwen2Config(**sizes), transformers.Qwen2ForCausalLM
    model = reference_model(cls, config, factor=3, sharpen=lambda name, p: p.dim() == 2 and "embed" not in name)
    model.save_pretrained(base)
    directory = root / f"{arch}-reranker"
    CrossEncoder(str(base), device="cpu", max_length=WINDOW).save(str(directory))
    assert json.loads((directory / "modules.json").read_text())[1]["path"] == "1_LogitScore"
    return directory


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    return save_reranker(tmp_path_factory.mktemp("lm"))


def _reference(directory):
    from sentence_transformers import CrossEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CrossEncoder(str(directory), device="cpu", max_length=WINDOW)


def _columns(pairs):
    return [a for a, _ in pairs], [b for _, b in pairs]


@pytest.mark.parametrize("unpad", [False, True])
def test_predict_equals_cross_encoder_with_and_without_a_prompt(reranker, unpad):
    """Sigmoid of logit(yes) - logit(no) at the last token, as CrossEncoder.predict gives it (it pads on the left;
    ours pads on the right or packs: rotary scores depend on j - i alone); the cut pair too, reported."""
    reference = _reference(reranker)
    clf = ma.Classifier.from_pretrained(reranker, max_length=WINDOW, unpad=unpad)
    assert clf.reranker and clf.activation() == "sigmoid" and clf.chat is not None
    texts, pairs = _columns(PAIRS)
    with pytest.warns(TruncationWarning, match="1 of 5"):
        got = clf.predict(texts, pairs)
    torch.testing.assert_close(got, torch.as_tensor(reference.predict(PAIRS)), **TOL)
    raw = clf.predict(texts, pairs, activation="none", warn_truncation=False)
    torch.testing.assert_close(raw, torch.as_tensor(reference.predict(PAIRS, activation_fn=torch.nn.Identity())),
                               **TOL)
    prompt = "Given a claim, find the evidence"
    prompted = clf.predict(texts, pairs, prompt=prompt, activation="none", warn_truncation=False)
    torch.testing.assert_close(prompted, torch.as_tensor(reference.predict(
        PAIRS, prompt=prompt, activation_fn=torch.nn.Identity())), **TOL)
    assert (prompted - raw).abs().max() > 1e-3  # the prompt reaches the model


def test_rank_equals_cross_encoder_rank(reranker):
    reference = _reference(reranker)
    clf = ma.Classifier.from_pretrained(reranker, max_length=WINDOW)
    documents = [d for _, d in PAIRS]
    theirs = [(r["corpus_id"], r["score"]) for r in reference.rank("What is the tower?", documents)]
    ours = clf.rerank("What is the tower?", documents, warn_truncation=False)
    assert [i for i, _ in ours] == [i for i, _ in theirs]
    torch.testing.assert_close(torch.tensor([s for _, s in ours]), torch.tensor([s for _, s in theirs]), **TOL)


def test_only_two_vocabulary_rows_are_read(reranker):
    """The head holds the yes / no rows of lm_head (k = 2, hidden 32); no parameter is vocabulary-sized but the
    input embeddings."""
    clf = ma.Classifier.from_pretrained(reranker, max_length=WINDOW)
    lm = transformers.AutoModelForCausalLM.from_pretrained(reranker)
    ids = [clf.tokenizer.backend.token_to_id(t) for t in ("yes", "no")]
    assert torch.equal(clf.model.head.vocabulary.weight, lm.lm_head.weight[ids].detach())
    vocabulary_sized = [n for n, p in clf.model.named_parameters() if clf.model.encoder.config.vocab_size in p.shape]
    assert vocabulary_sized == ["encoder.embeddings.word.weight"]


def test_a_pair_scores_the_same_bits_whatever_its_batch(reranker):
    clf = ma.Classifier.from_pretrained(reranker, max_length=WINDOW, unpad=True)
    texts, pairs = _columns(PAIRS)
    together = clf.predict(texts, pairs, warn_truncation=False)
    for i in range(len(PAIRS)):
        assert torch.equal(clf.predict(texts[i], pairs[i], warn_truncation=False), together[i])


def test_a_cut_row_keeps_the_template_tail(tmp_path):
    """sentence-transformers' suffix restore: a row past the window ends with the template's tail (the assistant
    turn the model answers after), written over its last tokens; a row within it is left as rendered."""
    qwen_tokenizer(tmp_path / "tok")
    tokenizer = ma.Tokenizer.from_pretrained(tmp_path / "tok")
    chat = ChatTemplate(TEMPLATE, special_tokens={"eos_token": "<|im_end|>"})
    long, short = chat.pair("tower", "word " * 300), chat.pair("tower", "word")
    rendered = chat.render(long)
    assert rendered.endswith("<|im_start|>assistant\n<think>\n\n</think>\n") and "<Query>: tower" in rendered
    assert chat.render(chat.pair("q", "d", prompt="Find it")).count("<Instruct>: Find it") == 1
    tail = tokenizer.backend.encode("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n",
                                    add_special_tokens=False).ids
    full = [tokenizer.backend.encode(chat.render(m), add_special_tokens=False).ids for m in (long, short)]
    encoded = chat.encode(tokenizer, [long, short], max_length=WINDOW)
    assert len(encoded.ids[0]) == WINDOW and encoded.truncated == [len(full[0]) - WINDOW, 0]
    assert encoded.ids[0][-len(tail):] == tail and encoded.ids[0][:WINDOW - len(tail)] == full[0][:WINDOW - len(tail)]
    assert encoded.ids[1] == full[1]


@pytest.mark.parametrize("arch,tied", [("qwen2", True), ("qwen3", False)])
def test_without_a_chat_template_pairs_are_text_pairs(tmp_path, arch, tied):
    """A tokenizer with no chat template: CrossEncoder reads the pair as text (its tokenizer's pair template, cut
    longest first); so do we. Qwen2 with tied embeddings: the rows come from the word embeddings."""
    directory = save_reranker(tmp_path, arch, tied=tied, template=None)
    reference = _reference(directory)
    clf = ma.Classifier.from_pretrained(directory, max_length=WINDOW)
    assert clf.chat is None
    texts, pairs = _columns(PAIRS[:4])
    torch.testing.assert_close(clf.predict(texts, pairs), torch.as_tensor(reference.predict(PAIRS[:4])), **TOL)


def test_a_logit_score_of_the_true_token_alone(reranker, tmp_path):
    """false_token_id null: the true token's logit alone (LogitScore.forward)."""
    directory = tmp_path / "true-only"
    shutil.copytree(reranker, directory)
    config = directory / "1_LogitScore" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "false_token_id": None}))
    reference = _reference(directory)
    clf = ma.Classifier.from_pretrained(directory, max_length=WINDOW)
    assert clf.model.head.vocabulary.weight.shape == (1, 32)
    texts, pairs = _columns(PAIRS[:3])
    torch.testing.assert_close(clf.predict(texts, pairs, activation="none"),
                               torch.as_tensor(reference.predict(PAIRS[:3], activation_fn=torch.nn.Identity())),
                               **TOL)


def _edited(reranker, target, change):
    shutil.copytree(reranker, target)
    change(target)
    return target


def _json_edit(name, **fields):
    def change(directory):
        path = directory / name
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    return change


@pytest.mark.parametrize("change,message", [
    (_json_edit("1_LogitScore/config.json", true_token_id=10 ** 6), "no rows"),
    (_json_edit("1_LogitScore/config.json", true_token_id="yes"), "true_token_id must be a token id"),
    (_json_edit("config.json", use_bidirectional_attention=True), "attends both ways"),
    (_json_edit("sentence_bert_config.json", transformer_task="feature-extraction"), "transformer_task"),
])
def test_what_cannot_be_run_is_refused_naming_it(reranker, tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        ma.Classifier.from_pretrained(_edited(reranker, tmp_path / "m", change))


def test_a_template_that_drops_a_role_is_refused(reranker, tmp_path):
    """sentence-transformers' pair-role probe: a template never showing the document cannot score a pair."""
    def change(directory):
        (directory / "chat_template.jinja").write_text(TEMPLATE.replace("<Document>: {{ message.content }}", ""))

    assert read_chat_template(reranker) == TEMPLATE
    with pytest.raises(ValueError, match="'document' content does not reach"):
        ma.Classifier.from_pretrained(_edited(reranker, tmp_path / "m", change))


def test_the_classify_command_and_the_rerank_route_score_as_predict(reranker, tmp_path):
    """`minialign classify` writes predict's scores; serve's TEI /rerank ranks as rerank does."""
    from starlette.testclient import TestClient

    from minialign.apps.serve import Limits, Models, Service

    clf = ma.Classifier.from_pretrained(reranker)  # the tokenizer's window, within the model's positions
    texts, pairs = _columns(PAIRS[:3])
    rows = tmp_path / "pairs.jsonl"
    rows.write_text("".join(json.dumps({"text": a, "pair": b}) + "\n" for a, b in PAIRS[:3]))
    assert cli(["classify", "--model", str(reranker), "--input", str(rows), "--pair-field", "pair",
                "--output", str(tmp_path / "out.jsonl")]) == 0
    written = [json.loads(line)["score"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    torch.testing.assert_close(torch.tensor(written), clf.predict(texts, pairs), atol=1e-6, rtol=0)
    with TestClient(Service(Models(classifier=clf), Limits()).app()) as client:
        answer = client.post("/rerank", json={"query": texts[0], "texts": pairs}).json()
    ranked = clf.rerank(texts[0], pairs)
    assert [a["index"] for a in answer] == [i for i, _ in ranked]
    assert [a["score"] for a in answer] == pytest.approx([s for _, s in ranked], abs=1e-6)


@pytest.mark.parametrize("where", ["max_seq_length", "text", "chat_template"])
def test_the_transformer_modules_window_is_read(reranker, tmp_path, where):
    """sentence_bert_config.json's max_seq_length, or processing_kwargs' max_length ("text" or "chat_template"), is
    the window, as CrossEncoder reads it (the chat template's size keywords are tokenization's, not its variables)."""
    def change(directory):
        path = directory / "sentence_bert_config.json"
        config = json.loads(path.read_text())
        if where == "max_seq_length":
            config["max_seq_length"] = 60
        else:
            config["processing_kwargs"] = {where: {"max_length": 60}}
        path.write_text(json.dumps(config))

    directory = _edited(reranker, tmp_path / "m", change)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = CrossEncoder_of(directory)
    clf = ma.Classifier.from_pretrained(directory)
    assert clf.max_length == 60
    texts, pairs = _columns(PAIRS[:3])
    torch.testing.assert_close(clf.predict(texts, pairs, activation="none", warn_truncation=False),
                               torch.as_tensor(reference.predict(PAIRS[:3], activation_fn=torch.nn.Identity())),
                               **TOL)


def CrossEncoder_of(directory):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(directory), device="cpu")


def test_truncation_side_left_and_no_saved_window(reranker, tmp_path):
    """tokenizer_config.json's truncation_side "left" cuts a row's start (CrossEncoder's tokenizer does); without a
    model_max_length the window is the model's positions (the Transformer module's rule), not 512."""
    def left(directory):
        path = directory / "tokenizer_config.json"
        config = json.loads(path.read_text())
        config.update(truncation_side="left", model_max_length=60)
        path.write_text(json.dumps(config))

    directory = _edited(reranker, tmp_path / "left", left)
    reference = CrossEncoder_of(directory)
    clf = ma.Classifier.from_pretrained(directory)
    assert clf.max_length == 60 and clf.chat.truncation_side == "left"
    texts, pairs = _columns(PAIRS[:3])
    torch.testing.assert_close(clf.predict(texts, pairs, activation="none", warn_truncation=False),
                               torch.as_tensor(reference.predict(PAIRS[:3], activation_fn=torch.nn.Identity())),
                               **TOL)

    def unsaved(directory):
        path = directory / "tokenizer_config.json"
        config = json.loads(path.read_text())
        config.pop("model_max_length")
        path.write_text(json.dumps(config))

    positions = json.loads((reranker / "config.json").read_text())["max_position_embeddings"]
    assert ma.Classifier.from_pretrained(_edited(reranker, tmp_path / "unsaved", unsaved)).max_length == positions


def test_a_message_format_left_out_is_inferred(reranker, tmp_path):
    """No "format" (sentence-transformers' "auto"): a template reading content as typed parts is structured."""
    structured = TEMPLATE.replace("{{ message.content }}", "{{ message.content[0].text }}")

    def change(directory):
        (directory / "chat_template.jinja").write_text(structured)
        path = directory / "sentence_bert_config.json"
        config = json.loads(path.read_text())
        config["modality_config"]["message"].pop("format")
        path.write_text(json.dumps(config))

    directory = _edited(reranker, tmp_path / "m", change)
    reference = CrossEncoder_of(directory)
    clf = ma.Classifier.from_pretrained(directory, max_length=WINDOW)
    assert clf.chat.message_format == "structured"
    texts, pairs = _columns(PAIRS[:3])
    torch.testing.assert_close(clf.predict(texts, pairs, activation="none"),
                               torch.as_tensor(reference.predict(PAIRS[:3], activation_fn=torch.nn.Identity())),
                               **TOL)
