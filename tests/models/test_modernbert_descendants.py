"""ModernBERT's descendants: checkpoints with `model_type: modernbert` trained by other code than
answerdotai's release, whose config.json carries settings the base model does not. mmBERT (jhu-clsp/mmBERT-small /
-base, multilingual, Gemma-3's tokenizer): its published config.json as read through a copy on the Hub
(datalama/mmBERT-small/config.json): both thetas 160000 (the local layers' too), pad 0, cls = sep = eos 1, bos 2,
mask 4, `classifier_pooling` "mean", and `position_embedding_type: "sans_pos"` (the training code's leftover, which
minialign refused as an unsupported position type before). The Ettin encoders (jhu-clsp/ettin-encoder-*) come from
the same training code and config writer. Each is built here at tiny sizes with those fields and compared with
transformers' ModernBertForMaskedLM / ModernBertForSequenceClassification; the tokenizer is a byte-fallback BPE
laid out as Gemma-3's tokenizer.json is (spaces as "▁", bytes as <0xNN>), under mmBERT's special ids."""

import json

import pytest
import torch
import transformers
from conftest import pad_batch

import minialign as ma

TOL = dict(atol=1e-5, rtol=0)
# datalama/mmBERT-small/config.json (a copy of jhu-clsp/mmBERT-small's), its sizes shrunk
MMBERT = {"architectures": ["ModernBertForMaskedLM"], "attention_bias": False, "attention_dropout": 0.0,
          "bos_token_id": 2, "classifier_activation": "gelu", "classifier_bias": False, "classifier_dropout": 0.0,
          "classifier_pooling": "mean", "cls_token_id": 1, "decoder_bias": True, "deterministic_flash_attn": False,
          "embedding_dropout": 0.0, "eos_token_id": 1, "global_attn_every_n_layers": 3, "global_rope_theta": 160000,
          "gradient_checkpointing": False, "hidden_activation": "gelu", "initializer_cutoff_factor": 2.0,
          "initializer_range": 0.02, "layer_norm_eps": 1e-05, "local_attention": 128, "local_rope_theta": 160000,
          "max_position_embeddings": 8192, "mlp_bias": False, "mlp_dropout": 0.0, "model_type": "modernbert",
          "norm_bias": False, "norm_eps": 1e-05, "pad_token_id": 0, "position_embedding_type": "sans_pos",
          "sep_token_id": 1, "tie_word_embeddings": True, "mask_token_id": 4,
          # shrunk from hidden 384, 22 layers, 6 heads, intermediate 1152, vocab 256000
          "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2, "intermediate_size": 48,
          "vocab_size": 300}
LENGTHS = (200, 170, 9)  # past the 128-token window (|i - j| <= 64) of the local layers


def _saved(tmp_path, cls, **overrides):
    config = transformers.ModernBertConfig(**{**MMBERT, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # non-zero norm weights, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "config.json").read_text())
    saved["position_embedding_type"] = "sans_pos"  # as the published file has it (transformers 5 drops the field)
    (tmp_path / "m" / "config.json").write_text(json.dumps(saved))
    return model, tmp_path / "m"


def _batch(vocab_size):
    torch.manual_seed(1)
    ids = torch.randint(5, vocab_size, (len(LENGTHS), max(LENGTHS)))
    return pad_batch(ids, list(LENGTHS), 0)


def test_mmbert_config_loads_and_its_masked_lm_matches_padded_and_packed(tmp_path):
    hf, directory = _saved(tmp_path, transformers.ModernBertForMaskedLM)
    model = ma.MaskedLMModel.from_pretrained(directory)
    assert model.config.rope_theta == model.config.local_rope_theta == 160000
    assert [layer.window for layer in model.encoder.layers] == [None, 64, 64, None]
    ids, mask = _batch(300)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            got = model(ids, attention_mask=mask, unpad=unpad).logits
            real = mask.bool()
            torch.testing.assert_close(got[real], expected[real], **TOL)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_mmbert_classifier_mean_pooling_matches(tmp_path, backend):
    hf, directory = _saved(tmp_path, transformers.ModernBertForSequenceClassification, num_labels=3)
    model = ma.ClassifierModel.from_pretrained(directory, attn_backend=backend)
    ids, mask = _batch(300)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask).logits
        for unpad in (False, True):
            torch.testing.assert_close(model(ids, attention_mask=mask, unpad=unpad).logits, expected, **TOL)


def gemma_style_tokenizer(directory):
    """A byte-fallback BPE laid out as Gemma-3's tokenizer.json (spaces normalised to "▁", no pre-tokenizer, unknown
    characters as <0xNN> byte tokens), under mmBERT's special ids (<pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4) and
    `<bos> A <eos>` / `<bos> A <eos> B <eos>`."""
    from family_builders import UNIGRAM_CORPUS
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  special_tokens=specials + [f"<0x{i:02X}>" for i in range(256)])
    tokenizer.train_from_iterator(UNIGRAM_CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>", special_tokens=[("<bos>", 2), ("<eos>", 1)])
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 64, "bos_token": "<bos>",
        "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
        "cls_token": "<bos>", "sep_token": "<eos>", "model_input_names": ["input_ids", "attention_mask"]}))
    return directory


def test_gemma_style_byte_fallback_tokenizer_ids_equal_transformers(tmp_path):
    from text.test_family_tokenizers import _assert_matches_transformers

    directory = gemma_style_tokenizer(tmp_path / "tok")
    ours = ma.Tokenizer.from_pretrained(directory)
    assert ours.pad_token_id == 0 and ours.mask_token == "<mask>"
    batch = ours(["Zürich 日本 café"])
    theirs = transformers.AutoTokenizer.from_pretrained(directory)(["Zürich 日本 café"], return_tensors="pt")
    assert torch.equal(batch["input_ids"], theirs["input_ids"])
    assert 5 + 0xE6 in batch["input_ids"][0].tolist()  # 日's first byte, as a byte token (<0xE6>: id 5 + 0xE6)
    _assert_matches_transformers(directory)


def test_fill_mask_on_an_mmbert_shaped_checkpoint_equals_the_pipeline(tmp_path):
    hf, directory = _saved(tmp_path, transformers.ModernBertForMaskedLM, vocab_size=600)
    gemma_style_tokenizer(directory)
    fill = ma.FillMask.from_pretrained(directory)
    pipe = transformers.pipeline("fill-mask", model=hf, tokenizer=transformers.AutoTokenizer.from_pretrained(directory))
    for text in ["The tower was built in <mask>.", "Zürich, Genève et <mask> sont des villes."]:
        got, want = fill(text, top_k=3), pipe(text, top_k=3)
        assert [g["token"] for g in got] == [w["token"] for w in want]
        assert max(abs(g["score"] - w["score"]) for g, w in zip(got, want)) < 1e-5
