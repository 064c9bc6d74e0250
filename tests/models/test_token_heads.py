"""TokenClassifierModel and QuestionAnsweringModel: every family's *ForTokenClassification / *ForQuestionAnswering
checkpoint (transformers' own, tiny and random), logits within 1e-5 of transformers' on the real tokens, padded and
packed (unpad=True); the class a checkpoint is for read from config.json's `architectures` (BERT's token head and
sequence head share `classifier.*`); strict loading; save_pretrained(layout="hf") loaded by transformers' Auto
classes, and native saves read back."""

import pytest
import torch
from conftest import pad_batch
from family_builders import FAMILIES, family_params

import minialign as ma
from minialign.convert import CheckpointError
from minialign.loading import Pretrained, read_checkpoint
from minialign.models.auto import model_class

TOL = dict(atol=1e-5, rtol=0)
TOKEN, QA = "ForTokenClassification", "ForQuestionAnswering"


def _batch(config, vocab: int, lengths=(13, 6, 9)):
    pad = config.pad_token_id
    ids = torch.randint(5, vocab, (len(lengths), max(lengths)), generator=torch.Generator().manual_seed(0))
    ids = ids.masked_fill(ids == pad, 5)
    return pad_batch(ids, list(lengths), pad)


def _outputs(model, ids, mask, **kwargs):
    """Token logits (B, L, n), or QA's start and end logits stacked (B, L, 2), of ours or transformers'."""
    with torch.no_grad():
        out = model(ids, mask, **kwargs) if isinstance(model, Pretrained) else model(ids, attention_mask=mask)
    if hasattr(out, "start_logits"):
        return torch.stack([out.start_logits, out.end_logits], dim=-1)
    return out.logits


def _parity(hf, ours, ids, mask) -> float:
    real = mask.bool()
    theirs = _outputs(hf, ids, mask)
    padded = _outputs(ours, ids, mask)
    packed = _outputs(ours, ids, mask, unpad=True)
    assert padded.shape == theirs.shape
    torch.testing.assert_close(padded[real], theirs[real], **TOL)
    torch.testing.assert_close(packed[real], theirs[real], **TOL)
    return (padded[real] - theirs[real]).abs().max().item()


def _skip_without_qa(arch: str, head: str) -> None:
    """A family transformers has no *ForQuestionAnswering for (EuroBERT) has no QA case: its own tests check the
    refusal (tests/models/test_eurobert.py)."""
    if head == QA and not FAMILIES[arch].question_answering:
        pytest.skip(f"transformers has no {FAMILIES[arch].config.removesuffix('Config')}{QA}")


@pytest.mark.parametrize("head,cls,labels", [(TOKEN, ma.TokenClassifierModel, 5), (QA, ma.QuestionAnsweringModel, 2)],
                         ids=["token", "qa"])
@pytest.mark.parametrize("arch", family_params(list(FAMILIES)))
def test_every_family_matches_transformers(arch, head, cls, labels, tiny_family):
    _skip_without_qa(arch, head)
    directory, hf = tiny_family.head(arch, head, labels)
    assert model_class(read_checkpoint(directory)) is cls  # from config.json's architectures
    ours = cls.from_pretrained(directory, attn_backend="eager")
    heads = ma.models.family_of(ours.config).heads(ours.config)
    kind = heads.token_classification if head == TOKEN else heads.question_answering
    assert (ours.classifier if head == TOKEN else ours.qa_outputs).kind == kind
    if head == TOKEN:
        assert ours.config.labels == tuple(hf.config.id2label[i] for i in range(labels))
    ids, mask = _batch(ours.config, hf.config.vocab_size)
    _parity(hf, ours, ids, mask)
    sdpa = cls.from_pretrained(directory)  # the default backend, packed
    real = mask.bool()
    torch.testing.assert_close(_outputs(sdpa, ids, mask, unpad=True)[real], _outputs(ours, ids, mask)[real], **TOL)


def test_a_text_is_the_same_whatever_it_is_batched_with(tiny_family):
    directory, hf = tiny_family.head("bert", TOKEN, 5)
    ours = ma.TokenClassifierModel.from_pretrained(directory)
    ids, mask = _batch(ours.config, hf.config.vocab_size)
    with torch.no_grad():
        alone = ours(ids[1:2, :6], mask[1:2, :6], unpad=True).logits[0]
        together = ours(ids, mask, unpad=True).logits[1, :6]
    assert torch.equal(alone, together)


@pytest.mark.parametrize("arch", ["bert", "roberta", "modernbert"])
def test_a_checkpoint_for_another_head_is_refused(arch, tiny_family):
    """The names of BERT's token and sequence heads are the same (`classifier.*`): config.json's architectures
    says which head a checkpoint holds, and a class for another head refuses it, naming both."""
    token_dir, _ = tiny_family.head(arch, TOKEN, 3)
    sequence_dir, _ = tiny_family.classifier(arch, 3)
    assert model_class(read_checkpoint(sequence_dir)) is ma.ClassifierModel
    with pytest.raises(CheckpointError, match=f"{TOKEN}.*not the .*ForSequenceClassification head"):
        ma.ClassifierModel.from_pretrained(token_dir)
    with pytest.raises(CheckpointError, match="ForSequenceClassification.*ForTokenClassification head"):
        ma.TokenClassifierModel.from_pretrained(sequence_dir)
    qa_dir, _ = tiny_family.head(arch, QA, 2)
    with pytest.raises(CheckpointError, match=QA):
        ma.TokenClassifierModel.from_pretrained(qa_dir)


def test_a_bare_model_gets_an_initialised_head_and_a_wrong_one_is_refused(tiny_family, tmp_path):
    directory, _ = tiny_family.hf("bert")
    with pytest.warns(UserWarning, match="qa_outputs"):
        ma.QuestionAnsweringModel.from_pretrained(directory)
    qa_dir, _ = tiny_family.head("bert", QA, 2)
    import safetensors.torch

    tensors = safetensors.torch.load_file(qa_dir / "model.safetensors")
    tensors["qa_outputs.bias"] = tensors["qa_outputs.bias"][:1].clone()
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((qa_dir / name).read_bytes())
    safetensors.torch.save_file(tensors, broken / "model.safetensors")
    with pytest.raises(CheckpointError, match="qa_outputs"):
        ma.QuestionAnsweringModel.from_pretrained(broken)
    config = ma.Config(arch="bert", vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=20,
                       labels=("a", "b", "c"))
    with pytest.raises(ValueError, match="two outputs"):
        ma.QuestionAnsweringModel(config)


@pytest.mark.parametrize("head,cls,auto", [(TOKEN, ma.TokenClassifierModel, "AutoModelForTokenClassification"),
                                           (QA, ma.QuestionAnsweringModel, "AutoModelForQuestionAnswering")],
                         ids=["token", "qa"])
@pytest.mark.parametrize("arch", family_params(list(FAMILIES)))
def test_saved_as_transformers_and_natively(arch, head, cls, auto, tiny_family, tmp_path):
    """save_pretrained(layout="hf") writes transformers' class: its Auto class loads it with no missing or unexpected
    weight and gives the original's logits; minialign reads both layouts back bit for bit, as the same class."""
    if head == QA and not FAMILIES[arch].question_answering:
        pytest.skip(f"transformers has no {arch} {QA}")
    import transformers

    _skip_without_qa(arch, head)
    directory, hf = tiny_family.head(arch, head, 3 if head == TOKEN else 2)
    ours = cls.from_pretrained(directory)
    out = ours.save_pretrained(tmp_path / "hf", layout="hf")
    back, info = getattr(transformers, auto).from_pretrained(out, output_loading_info=True,
                                                             attn_implementation="eager")
    assert type(back) is type(hf)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids, mask = _batch(ours.config, hf.config.vocab_size)
    real = mask.bool()
    torch.testing.assert_close(_outputs(back.eval(), ids, mask)[real], _outputs(hf, ids, mask)[real], **TOL)
    native = ours.save_pretrained(tmp_path / "native")
    for saved in (out, native):
        assert model_class(read_checkpoint(saved)) is cls
        assert torch.equal(_outputs(cls.from_pretrained(saved), ids, mask), _outputs(ours, ids, mask))


def test_a_sequence_classifier_is_still_written_with_its_own_names(tiny_family, tmp_path):
    """RoBERTa's sequence head keeps classifier.out_proj when saved (the token head's classifier.weight is the other
    name of the same minialign weight)."""
    import transformers

    directory, hf = tiny_family.classifier("roberta", 3)
    out = ma.ClassifierModel.from_pretrained(directory).save_pretrained(tmp_path / "hf", layout="hf")
    back, info = transformers.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info


@pytest.mark.parametrize("arch,head", [("roberta", TOKEN), ("modernbert", QA), ("distilbert", QA)])
def test_a_checkpoint_converted_to_transformers_keeps_its_class(arch, head, tiny_family, tmp_path):
    """loading.export_hf (`minialign convert --to hf`) writes a token or QA checkpoint as the class its config.json
    names (RoBERTa's token head as classifier.weight, not its sequence head's classifier.out_proj)."""
    import transformers

    from minialign.loading import export_hf

    directory, hf = tiny_family.head(arch, head, 3 if head == TOKEN else 2)
    out = export_hf(read_checkpoint(directory), tmp_path / "hf")
    auto = transformers.AutoModelForTokenClassification if head == TOKEN else transformers.AutoModelForQuestionAnswering
    back, info = auto.from_pretrained(out, output_loading_info=True, attn_implementation="eager")
    assert type(back) is type(hf)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids, mask = _batch(hf.config, hf.config.vocab_size)
    torch.testing.assert_close(_outputs(back.eval(), ids, mask), _outputs(hf, ids, mask), atol=0, rtol=0)
