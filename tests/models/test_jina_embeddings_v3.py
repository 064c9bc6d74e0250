"""jina-embeddings-v3 (minialign/models/jina_embeddings_v3.py) against transformers' JinaEmbeddingsV3Model and its
heads (eager attention, fp32): tiny random models built and saved here (non-zero biases and norms, rope_theta 100 so
150 tokens turn through many periods), every backend, padded and packed; the converter both ways; its config.json;
its Unigram tokenizer; the products (SentenceEncoder vs SentenceTransformer, Classifier, TokenClassifier, FillMask).

The task adapters: a checkpoint in jina's own layout (jinaai/xlm-roberta-flash-implementation's XLMRobertaLoRA:
model_type "xlm-roberta", position_embedding_type "rotary", torch parametrizations holding the weight and every
task's lora_A / lora_B) is written here by hand with safetensors. Loaded with adapter=, it equals transformers' native
model on the weights merged by jina's formula (modeling_lora.py LoRAParametrization.lora_forward, re-implemented
below with its `swap`); without a task, the base weights."""

import dataclasses
import json
import shutil

import pytest
import torch
import transformers
from conftest import encoder_parity, pad_batch, reference_model
from family_builders import FAMILIES, UNIGRAM_SIZE, write_tokenizer
from safetensors.torch import save_file

import minialign as ma
from minialign import convert
from minialign.apps.cli import main as cli
from minialign.convert import CheckpointError
from minialign.loading import read_checkpoint

TOL = dict(atol=1e-5, rtol=0)
BACKENDS = ["eager", "sdpa", pytest.param("flex", marks=pytest.mark.slow)]
LENGTHS = (150, 131, 9)
TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
PROMPTS = {"retrieval.query": "Represent the query for retrieving evidence documents: ",
           "retrieval.passage": "Represent the document for retrieval: ", "separation": "", "classification": "",
           "text-matching": ""}
RANK, ALPHA = 4, 2.0  # scaling 0.5: a merge that forgets it cannot pass
TEXTS = ["The tower was built in Paris.", "Der Turm wurde in Paris gebaut und 1889 eröffnet, sagte die Polizei.",
         "A short claim."]


def hf_config(**overrides):
    base = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                max_position_embeddings=256, pad_token_id=1, bos_token_id=0, eos_token_id=2, rope_theta=100.0,
                layer_norm_eps=1e-5)
    return transformers.JinaEmbeddingsV3Config(**{**base, **overrides})


def hf_model(cls=transformers.JinaEmbeddingsV3Model, **overrides):
    return reference_model(cls, hf_config(**overrides), factor=4,
                           sharpen=lambda name, p: "q_proj" in name or "k_proj" in name)


def _saved(tmp_path, cls=transformers.JinaEmbeddingsV3Model, **overrides):
    hf = hf_model(cls, **overrides)
    hf.save_pretrained(tmp_path / "m")
    return hf, tmp_path / "m"


def _batch(config, lengths=LENGTHS):
    torch.manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (len(lengths), max(lengths)))
    return pad_batch(ids, list(lengths), config.pad_token_id)


@pytest.mark.parametrize("backend", BACKENDS)
def test_encoder_parity_padded_and_packed(backend, tmp_path):
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend=backend)
    assert ours.config.arch == "jina_embeddings_v3" and ours.config.rope_theta == 100.0 and ours.pooler is not None
    ids, mask = _batch(hf.config)
    _, _, diffs = encoder_parity(hf, ours, mask.bool(), TOL, pooler=True, input_ids=ids, attention_mask=mask)
    assert {f"hidden_{i}" for i in range(3)} | {f"attention_{i}" for i in range(2)} <= set(diffs)


def test_theta_matters_and_a_text_is_bit_identical_in_any_batch(tmp_path):
    """Another rotary base gives another result; packed, a text's states are the same bits alone or batched."""
    hf, directory = _saved(tmp_path)
    ours = ma.Encoder.from_pretrained(directory, attn_backend="sdpa")
    ids, mask = _batch(hf.config)
    other = ma.Encoder(dataclasses.replace(ours.config, rope_theta=10000.0), attn_backend="sdpa")
    other.load_state_dict(ours.state_dict())
    with torch.no_grad():
        a, b = ours(ids, attention_mask=mask), other(ids, attention_mask=mask)
        assert (a.last_hidden_state - b.last_hidden_state)[mask.bool()].abs().max() > 1e-3
        batched = ours(ids, attention_mask=mask, unpad=True).last_hidden_state
        for i, n in enumerate(LENGTHS):
            alone = ours(ids[i:i + 1, :n], attention_mask=mask[i:i + 1, :n], unpad=True).last_hidden_state
            assert torch.equal(alone[0], batched[i, :n]), i


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
                                  "ForMaskedLM"])
def test_head_logits(head, tmp_path):
    """Every head transformers has for the family, loaded from the directory it saved, padded and packed."""
    cls = getattr(transformers, "JinaEmbeddingsV3" + head)
    hf, directory = _saved(tmp_path, cls, **({} if head in ("ForMaskedLM", "ForQuestionAnswering") else
                                              {"num_labels": 3}))
    ours = {"ForSequenceClassification": ma.ClassifierModel, "ForTokenClassification": ma.TokenClassifierModel,
            "ForQuestionAnswering": ma.QuestionAnsweringModel, "ForMaskedLM": ma.MaskedLMModel}[head]
    model = ours.from_pretrained(directory, attn_backend="eager")
    ids, mask = _batch(hf.config)
    real = mask.bool()
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask)
        for unpad in (False, True):
            got = model(ids, attention_mask=mask, unpad=unpad)
            if head == "ForSequenceClassification":
                torch.testing.assert_close(got.logits, theirs.logits, **TOL)
            elif head == "ForQuestionAnswering":
                torch.testing.assert_close(got.start_logits[real], theirs.start_logits[real], **TOL)
                torch.testing.assert_close(got.end_logits[real], theirs.end_logits[real], **TOL)
            else:
                torch.testing.assert_close(got.logits[real], theirs.logits[real], **TOL)


@pytest.mark.parametrize("cls", [transformers.JinaEmbeddingsV3Model, transformers.JinaEmbeddingsV3ForSequenceClassification])
def test_convert_round_trip_loads_in_transformers(cls, tmp_path):
    labels = {"num_labels": 2} if cls is not transformers.JinaEmbeddingsV3Model else {}
    hf, directory = _saved(tmp_path, cls, **labels)
    assert cli(["convert", str(directory), str(tmp_path / "native")]) == 0
    assert cli(["convert", str(tmp_path / "native"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    auto = transformers.AutoModel if cls is transformers.JinaEmbeddingsV3Model else \
        transformers.AutoModelForSequenceClassification
    back, info = auto.from_pretrained(tmp_path / "hf", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and type(back) is cls
    assert back.config.rope_parameters == hf.config.rope_parameters
    saved = convert.read_safetensors(directory / "model.safetensors")
    exported = convert.read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert set(exported) == set(saved)
    for k, v in saved.items():
        assert torch.equal(exported[k], v), k


def test_config_rope_parameters_preset_and_refusals():
    config = ma.Config.from_hf(hf_config(num_labels=2).to_dict())
    assert (config.arch, config.rope_theta, config.type_vocab_size, config.labels) == \
        ("jina_embeddings_v3", 100.0, 1, ("LABEL_0", "LABEL_1"))
    default = ma.Config.from_hf({k: v for k, v in hf_config().to_dict().items() if k != "rope_parameters"})
    assert default.rope_theta == 20000.0  # JinaEmbeddingsV3Config.default_theta
    back = transformers.JinaEmbeddingsV3Config(**config.to_hf())
    assert back.rope_parameters["rope_theta"] == 100.0 and back.hidden_size == 32
    preset = ma.Config.from_name("jina-embeddings-v3")
    assert (preset.hidden_size, preset.num_layers, preset.max_seq_len, preset.rope_theta) == (1024, 24, 8194, 20000.0)
    scaled = hf_config().to_dict()
    scaled["rope_parameters"] = {"rope_theta": 100.0, "rope_type": "linear", "factor": 2.0}
    with pytest.raises(ValueError, match="rope_type"):
        ma.Config.from_hf(scaled)
    with pytest.raises(ValueError, match="rope_theta"):
        dataclasses.replace(config, rope_theta=0)


def test_tokenizer_ids_equal_transformers(tmp_path):
    """XLM-R's SentencePiece Unigram (`<s> A </s></s> B </s>`) under the family's model_type: AutoTokenizer picks
    XLMRobertaTokenizer for it (tokenization_auto.py); the ids and keys are minialign's."""
    from text.test_family_tokenizers import _assert_matches_transformers

    write_tokenizer(FAMILIES["jina_embeddings_v3"], tmp_path, wordpiece_dir=tmp_path, bpe_dir=tmp_path)
    hf_config(vocab_size=UNIGRAM_SIZE).save_pretrained(tmp_path)
    assert type(transformers.AutoTokenizer.from_pretrained(tmp_path)).__name__.startswith("XLMRobertaTokenizer")
    _assert_matches_transformers(tmp_path)


# -- products -------------------------------------------------------------------------------------------------------

def test_sentence_encoder_equals_sentence_transformers(tiny_family):
    from sentence_transformers import SentenceTransformer

    directory = tiny_family.sentence_transformers("jina_embeddings_v3", normalize=True)
    ours = ma.SentenceEncoder.from_pretrained(directory, batch_size=2)
    theirs = SentenceTransformer(str(directory), device="cpu")
    torch.testing.assert_close(ours.encode(TEXTS), theirs.encode(TEXTS, convert_to_tensor=True), **TOL)


def test_classifier_token_classifier_fill_mask(tiny_family):
    directory, hf = tiny_family.classifier("jina_embeddings_v3", 3)
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    with torch.no_grad():
        expected = hf(**tok(TEXTS, padding=True, return_tensors="pt")).logits
    got = ma.Classifier.from_pretrained(directory).predict(TEXTS, activation="none")
    torch.testing.assert_close(got, expected, **TOL)

    directory, hf = tiny_family.head("jina_embeddings_v3", "ForTokenClassification", 3)
    tagger = transformers.pipeline("token-classification", model=str(directory), device="cpu",
                                   aggregation_strategy="none", ignore_labels=[])
    mine = ma.TokenClassifier.from_pretrained(directory).predict(TEXTS, aggregation_strategy="none", ignore_labels=[])
    for a, b in zip(mine, [tagger(text) for text in TEXTS], strict=True):
        assert [(e["entity"], e["start"], e["end"]) for e in a] == [(e["entity"], e["start"], e["end"]) for e in b]
        torch.testing.assert_close(torch.tensor([float(e["score"]) for e in a]),
                                   torch.tensor([float(e["score"]) for e in b]), **TOL)

    directory, hf = tiny_family.masked_lm("jina_embeddings_v3")
    pipe = transformers.pipeline("fill-mask", model=str(directory), device="cpu")
    text = "The tower was <mask> in Paris."
    (ours,) = ma.FillMask.from_pretrained(directory).predict([text], top_k=3)
    theirs = pipe(text, top_k=3)
    assert [r["token"] for r in ours] == [r["token"] for r in theirs]
    torch.testing.assert_close(torch.tensor([r["score"] for r in ours]), torch.tensor([r["score"] for r in theirs]),
                               **TOL)


# -- the task adapters (jina's own layout) ---------------------------------------------------------------------------

LINEAR = ("mixer.Wqkv", "mixer.out_proj", "mlp.fc1", "mlp.fc2", "pooler.dense")
EMBEDDING = ("embeddings.word_embeddings", "embeddings.token_type_embeddings")


def jina_lora_forward(weight, lora_a, lora_b, task, scaling, *, embedding):
    """modeling_lora.py LoRAParametrization.lora_forward, as jina wrote it: X + matmul(*swap((B[t], A[t]))).view(X.shape)
    * scaling, `swap` exchanging the two for an Embedding (fan_in_fan_out)."""
    swap = (lambda x: (x[1], x[0])) if embedding else (lambda x: x)
    return weight + torch.matmul(*swap((lora_b[task], lora_a[task]))).view(weight.shape) * scaling


def jina_checkpoint(tmp_path, hf, *, prompts=True):
    """`hf`'s weights in jina's XLMRobertaLoRA layout (names under `roberta.`, every Linear and Embedding weight a
    parametrization with 5 random adapters of rank RANK), its config.json as jina's, the tokenizer and, with
    prompts, a sentence-transformers directory's files (custom_st.Transformer, mean pooling, Normalize; the prompts
    per task). Returns (the directory, {task: the weights merged by jina's formula, transformers' names})."""
    directory = tmp_path / "jina"
    hf.save_pretrained(tmp_path / "native")
    base = convert.read_safetensors(tmp_path / "native" / "model.safetensors")
    torch.manual_seed(3)
    state, merged = {}, {task: {} for task in TASKS}
    for name, tensor in base.items():
        layer = name.removesuffix(".weight")
        kind = "embedding" if layer.endswith(EMBEDDING) else "linear" if layer.endswith(LINEAR) else None
        if kind is None:
            state[f"roberta.{name}"] = tensor.clone()
            for task in TASKS:
                merged[task][name] = tensor
            continue
        rows, cols = tensor.shape
        a, b = ((torch.randn(5, rows, RANK), torch.randn(5, RANK, cols)) if kind == "embedding" else
                (torch.randn(5, RANK, cols), torch.randn(5, rows, RANK)))
        a, b = a * 0.1, b * 0.1
        state[f"roberta.{layer}.parametrizations.weight.original"] = tensor.clone()
        state[f"roberta.{layer}.parametrizations.weight.0.lora_A"] = a
        state[f"roberta.{layer}.parametrizations.weight.0.lora_B"] = b
        for t, task in enumerate(TASKS):
            merged[task][name] = jina_lora_forward(tensor, a, b, t, ALPHA / RANK, embedding=kind == "embedding")
    directory.mkdir()
    save_file(state, str(directory / "model.safetensors"))
    config = {k: v for k, v in hf.config.to_dict().items() if k not in ("rope_parameters", "architectures")}
    config.update(model_type="xlm-roberta", architectures=["XLMRobertaLoRA"], position_embedding_type="rotary",
                  rotary_emb_base=hf.config.rope_parameters["rope_theta"], lora_adaptations=TASKS, lora_rank=RANK,
                  lora_alpha=ALPHA, lora_dropout_p=0.0, load_trained_adapters=True, task_instructions=PROMPTS,
                  auto_map={"AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_lora.XLMRobertaLoRA"})
    (directory / "config.json").write_text(json.dumps(config))
    write_tokenizer(FAMILIES["jina_embeddings_v3"], directory, wordpiece_dir=tmp_path, bpe_dir=tmp_path)
    if prompts:
        (directory / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "transformer", "path": "", "type": "custom_st.Transformer"},
            {"idx": 1, "name": "pooler", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "normalizer", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
        (directory / "1_Pooling").mkdir()
        (directory / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": hf.config.hidden_size, "pooling_mode_mean_tokens": True}))
        (directory / "2_Normalize").mkdir()
        (directory / "config_sentence_transformers.json").write_text(json.dumps(
            {"prompts": PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"}))
    return directory, merged


def native_with(tmp_path, hf, weights, task):
    """transformers' model on `weights` (transformers' names), saved beside the jina directory's tokenizer (a Unigram
    trained again may differ)."""
    directory = tmp_path / f"native-{task}"
    hf.save_pretrained(directory)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(directory / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tmp_path / "jina" / name, directory / name)
    model = transformers.JinaEmbeddingsV3Model.from_pretrained(directory, attn_implementation="eager").eval()
    return directory, model


def test_jina_layout_merges_each_tasks_adapter(tmp_path):
    """Each task's merged weights are jina's formula's, within float32 rounding; the model on them equals
    transformers' on the same merged weights (padded and packed); no task: the base weights, bit for bit."""
    hf = hf_model(vocab_size=UNIGRAM_SIZE)
    directory, merged = jina_checkpoint(tmp_path, hf, prompts=False)
    ids, mask = _batch(hf.config, lengths=(140, 33))
    for task in ("retrieval.query", "classification"):
        ckpt = read_checkpoint(directory, task=task)
        assert ckpt.config.arch == "jina_embeddings_v3" and ckpt.config.rope_theta == 100.0
        expected, _ = convert.hf_to_minialign(merged[task], "jina_embeddings_v3")
        assert set(ckpt.tensors) == set(expected)
        for name, tensor in expected.items():
            torch.testing.assert_close(ckpt.tensors[name], tensor, atol=1e-6, rtol=0)
        assert not torch.equal(ckpt.tensors["encoder.layers.0.attention.qkv.weight"],
                               convert.read_safetensors(directory / "model.safetensors")[
                                   "roberta.encoder.layers.0.mixer.Wqkv.parametrizations.weight.original"])
        _, native = native_with(tmp_path, hf, merged[task], task)
        ours = ma.Encoder.from_pretrained(directory, adapter=task, attn_backend="eager")
        encoder_parity(native, ours, mask.bool(), TOL, pooler=True, input_ids=ids, attention_mask=mask)
    plain = ma.Encoder.from_pretrained(directory, attn_backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(plain(ids, attention_mask=mask).last_hidden_state[mask.bool()],
                                   hf(ids, attention_mask=mask).last_hidden_state[mask.bool()], **TOL)
    base = convert.read_safetensors(tmp_path / "native" / "model.safetensors")
    assert torch.equal(plain.embeddings.word.weight, base["embeddings.word_embeddings.weight"])


def test_task_errors_name_the_problem(tmp_path):
    hf = hf_model(vocab_size=UNIGRAM_SIZE)
    directory, _ = jina_checkpoint(tmp_path, hf, prompts=False)
    with pytest.raises(CheckpointError, match="'search' is not one of this checkpoint's adapters.*'retrieval.query'"):
        ma.Encoder.from_pretrained(directory, adapter="search")
    hf.save_pretrained(tmp_path / "plain")
    with pytest.raises(CheckpointError, match="carries no task adapters"):
        ma.Encoder.from_pretrained(tmp_path / "plain", adapter="retrieval.query")
    state = convert.read_safetensors(directory / "model.safetensors")
    name = "roberta.encoder.layers.0.mlp.fc1.parametrizations.weight.0.lora_A"
    state[name] = state[name][:, :2].contiguous()  # rank 2, not the config's 4
    save_file(state, str(directory / "model.safetensors"))
    with pytest.raises(CheckpointError, match="mlp.fc1.*rank 4"):
        ma.Encoder.from_pretrained(directory, adapter="separation")
    config = json.loads((directory / "config.json").read_text())
    del config["rotary_emb_base"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="rotary_emb_base"):
        read_checkpoint(directory)


def test_sentence_encoder_task_adapter_and_its_prompt(tmp_path):
    """A jina sentence-transformers directory loaded with adapter=: the task's adapter merged and its prompt the default,
    as SentenceTransformer on the merged weights encodes with prompt_name=task; a call's own prompt_name still wins."""
    from sentence_transformers import SentenceTransformer, models

    hf = hf_model(vocab_size=UNIGRAM_SIZE)
    directory, merged = jina_checkpoint(tmp_path, hf)
    task = "retrieval.query"
    native_dir, _ = native_with(tmp_path, hf, merged[task], task)
    transformer = models.Transformer(str(native_dir))
    theirs = SentenceTransformer(modules=[transformer, models.Pooling(32, pooling_mode="mean"), models.Normalize()],
                                 device="cpu", prompts=PROMPTS)
    ours = ma.SentenceEncoder.from_pretrained(directory, adapter=task, batch_size=2)
    assert ours.default_prompt_name == task
    torch.testing.assert_close(ours.encode(TEXTS), theirs.encode(TEXTS, prompt_name=task, convert_to_tensor=True),
                               **TOL)
    torch.testing.assert_close(ours.encode(TEXTS, prompt_name="text-matching"),
                               theirs.encode(TEXTS, prompt_name="text-matching", convert_to_tensor=True), **TOL)
    assert ma.SentenceEncoder.from_pretrained(directory).default_prompt_name is None


def test_the_command_line_takes_the_adapter(tmp_path, capsys):
    """`minialign embed --adapter TASK` loads as SentenceEncoder.from_pretrained(adapter=TASK) does; a checkpoint without
    adapters is refused naming why."""
    import json as json_module

    from minialign.apps.cli import main as cli

    hf = hf_model(vocab_size=UNIGRAM_SIZE)
    directory, _ = jina_checkpoint(tmp_path, hf)
    task = "retrieval.query"
    expected = ma.SentenceEncoder.from_pretrained(directory, adapter=task).encode(TEXTS[0])
    assert cli(["embed", "--model", str(directory), "--adapter", task, "--text", TEXTS[0]]) == 0
    got = torch.tensor(json_module.loads(capsys.readouterr().out))
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    plain = ma.SentenceEncoder.from_pretrained(directory).encode(TEXTS[0])
    assert (plain - expected).abs().max() > 1e-4  # the adapter changed the embedding


# -- the task adapters chosen per call (nn/lora.py) ------------------------------------------------------------------

@pytest.mark.parametrize("unpad", [False, True])
def test_an_adapter_chosen_per_call_equals_it_merged_on_loading(tmp_path, unpad):
    """Loaded without adapter=, jina's checkpoint keeps every task's adapter apart: a forward under lora.chosen(task)
    equals the model loaded with that task merged (float32 rounding: the two small products instead of one on
    W + scaling * B A), padded and packed, the feed-forward's fused activation applied after the adapter's term;
    no task chosen: the base weights, bit for bit; the state dict is the plain encoder's."""
    from minialign.nn import lora

    hf = hf_model(vocab_size=UNIGRAM_SIZE)
    directory, _ = jina_checkpoint(tmp_path, hf, prompts=False)
    ids, mask = _batch(hf.config, lengths=(140, 33, 7))
    real = mask.bool()
    kept = ma.Encoder.from_pretrained(directory)
    assert lora.adapters_of(kept).tasks == tuple(TASKS)
    assert kept.layers[0].ffn.up.activation is None  # applied by the hook, after the adapter's term
    with torch.no_grad():
        base = kept(ids, attention_mask=mask, unpad=unpad).last_hidden_state
        for task in ("retrieval.passage", "text-matching"):
            merged = ma.Encoder.from_pretrained(directory, adapter=task)
            assert lora.adapters_of(merged) is None and set(merged.state_dict()) == set(kept.state_dict())
            expected = merged(ids, attention_mask=mask, unpad=unpad).last_hidden_state
            with lora.chosen(kept, task):
                got = kept(ids, attention_mask=mask, unpad=unpad).last_hidden_state
            torch.testing.assert_close(got[real], expected[real], **TOL)
            assert (got[real] - base[real]).abs().max() > 1e-2  # the adapter changed the states
        plain = hf(ids, attention_mask=mask).last_hidden_state
        assert torch.equal(kept(ids, attention_mask=mask, unpad=unpad).last_hidden_state, base)
    torch.testing.assert_close(base[real], plain[real], **TOL)


def test_sentence_encoder_chooses_the_adapter_per_call(tmp_path):
    """SentenceEncoder.encode(adapter=) equals the encoder loaded with that adapter (its prompt the default, as there);
    a call's own prompt_name wins; a text alone gets the same bits as in a batch; the choice is the call's and its
    thread's (another thread's forward meanwhile runs the base weights); bad choices are named."""
    import threading

    from minialign.nn import lora

    hf = hf_model(vocab_size=UNIGRAM_SIZE)
    directory, _ = jina_checkpoint(tmp_path, hf)
    ours = ma.SentenceEncoder.from_pretrained(directory, batch_size=2)
    plain = ours.encode(TEXTS)
    for task in ("retrieval.query", "separation"):
        fixed = ma.SentenceEncoder.from_pretrained(directory, adapter=task, batch_size=2)
        got = ours.encode(TEXTS, adapter=task)
        torch.testing.assert_close(got, fixed.encode(TEXTS), **TOL)
        torch.testing.assert_close(ours.encode(TEXTS, adapter=task, prompt_name="text-matching"),
                                   fixed.encode(TEXTS, prompt_name="text-matching"), **TOL)
        assert torch.equal(torch.stack([ours.encode(text, adapter=task) for text in TEXTS]), got)
    torch.testing.assert_close(ours.encode(TEXTS), plain, atol=0, rtol=0)  # no choice left behind

    seen = {}
    ids, mask = _batch(hf.config, lengths=(20, 9))
    started, finish = threading.Event(), threading.Event()

    def other_thread():
        started.wait()
        with torch.no_grad():
            seen["other"] = ours.model(ids, attention_mask=mask).last_hidden_state
        finish.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with torch.no_grad(), lora.chosen(ours.model, "classification"):
        started.set()
        finish.wait(timeout=60)
        chosen = ours.model(ids, attention_mask=mask).last_hidden_state
    thread.join(timeout=60)
    with torch.no_grad():
        assert torch.equal(seen["other"], ours.model(ids, attention_mask=mask).last_hidden_state)
    assert not torch.equal(chosen, seen["other"])

    with pytest.raises(ValueError, match="'search' is not one of this model's task adapters.*'retrieval.query'"):
        ours.encode(TEXTS, adapter="search")
    with pytest.raises(ValueError, match="keeps no task adapters apart.*merged"):
        ma.SentenceEncoder.from_pretrained(directory, adapter="separation").encode(TEXTS, adapter="separation")
