"""Parity check: load one checkpoint in minialign and in transformers, run the same inputs
through both, print the max abs difference per layer. Needs transformers (the `test` extra).

It compares two implementations of the same weights, not the weights: a checkpoint whose weights are wrong
(perturbed, another model's, badly trained) passes, since both sides compute the same wrong function. Only a
NaN or an infinity in a weight is a failure by itself, named before any comparison.

The transformers side reads the source with transformers' own loader where one exists (an HF
directory or hub id: AutoModel; an AlignScore .ckpt: the `base_model.` weights into AutoModel and
nn.Linear heads), so a bug in minialign's name tables shows up as a difference. A minialign
directory has no foreign original; it is exported to HF layout first.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch

from minialign import convert
from minialign.apps import extra_hint

from minialign.loading import HEADS_FILE, build, export_hf, read_checkpoint
from minialign.models.auto import model_class
from minialign.models.head_models import AlignModel, ClassifierModel
from minialign.text.tokenizer import Tokenizer

SAMPLE_PAIRS = [
    ("The Eiffel Tower was completed in 1889 for the World's Fair in Paris.", "The tower opened in 1889."),
    ("Marie Curie won two Nobel Prizes, in physics and in chemistry.", "Curie won a Nobel Prize."),
    ("A short one.", "Another sentence that is a little longer than the first one, to force padding."),
]
HEADS = ("bin_layer", "tri_layer", "reg_layer")


def _reference(src: str, ckpt, tmp: Path, *, classifier: bool = False):
    """(transformers model in eager mode: the backbone, or *ForSequenceClassification for a
    classifier; {head: nn.Linear} from the source's own weights)."""
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    if classifier:
        AutoModel = AutoModelForSequenceClassification  # noqa: N806  (the same loading, another class)

    path = Path(src).expanduser()
    heads: dict[str, torch.Tensor] = {}
    if path.is_file():  # AlignScore .ckpt
        state_dict, _ = convert.read_alignscore_ckpt(path)
        config = AutoConfig.for_model(**ckpt.config.to_hf())
        model = AutoModel.from_config(config, attn_implementation="eager")
        backbone = {k[len("base_model."):]: v for k, v in state_dict.items() if k.startswith("base_model.")}
        result = model.load_state_dict(backbone, strict=False)
        missing = [k for k in result.missing_keys if "position_ids" not in k]
        if missing:
            raise RuntimeError(f"transformers found no weights for {missing} in {path}")
        heads = {k: v for k, v in state_dict.items() if k.split(".")[0] in HEADS}
    else:
        if path.is_dir() and "minialign_format" in convert.read_json(path / "config.json"):
            path = export_hf(ckpt, tmp / "hf")
        model = AutoModel.from_pretrained(str(path) if path.exists() else src, attn_implementation="eager")
        if (path / HEADS_FILE).is_file():
            heads = {k: v for k, v in convert.read_safetensors(path / HEADS_FILE).items() if k.split(".")[0] in HEADS}
    linears = {}
    for name in HEADS:
        if f"{name}.weight" in heads:
            w, b = heads[f"{name}.weight"], heads[f"{name}.bias"]
            linear = torch.nn.Linear(w.shape[1], w.shape[0])
            linear.load_state_dict({"weight": w.float(), "bias": b.float()})
            linears[name] = linear
    return model.float().eval(), linears


def _inputs(ckpt) -> dict[str, torch.Tensor]:
    directory = ckpt.tokenizer_dir
    if directory is not None:
        try:
            tok = Tokenizer.from_dir(directory)
            batch = tok([a for a, _ in SAMPLE_PAIRS], [b for _, b in SAMPLE_PAIRS])
            if int(batch["input_ids"].max()) < ckpt.config.vocab_size:
                return batch
        except (FileNotFoundError, ValueError):
            pass
    config = ckpt.config
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (3, 24), generator=g)
    if config.pad_token_id + 1 >= config.vocab_size:
        ids = torch.randint(0, config.vocab_size, (3, 24), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    mask[2, 6:] = 0
    ids[mask == 0] = config.pad_token_id
    return {"input_ids": ids, "attention_mask": mask}


def non_finite_weights(tensors: dict[str, torch.Tensor], *, name=str) -> list[str]:
    """"name: N NaN, M infinity" for each floating tensor of `tensors` holding a NaN or an infinity, in their order;
    `name` turns a key into the name said (Checkpoint.own_name: the file's)."""
    said = []
    for key, t in tensors.items():
        if t.is_floating_point():
            nan, inf = int(t.isnan().sum()), int(t.isinf().sum())
            if nan or inf:
                counts = ", ".join(f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "infinity")) if n)
                said.append(f"{name(key)}: {counts}")
    return said


def difference(name: str, reference: torch.Tensor, ours: torch.Tensor, rows=None,
               problems: list[str] | None = None) -> float:
    """Max abs difference of two tensors (on `rows` when given); inf when either holds a NaN or an infinity,
    which is a failure whatever the tolerance (a NaN would slip through Python's max and any `<=`), said in
    `problems`. Raises ValueError when the shapes differ."""
    if reference.shape != ours.shape:
        raise ValueError(f"{name}: shapes differ, reference {tuple(reference.shape)} vs minialign {tuple(ours.shape)}")
    a, b = reference.float(), ours.float()
    if rows is not None:
        a, b = a[rows], b[rows]
    bad = {side: int((~torch.isfinite(t)).sum()) for side, t in (("reference", a), ("minialign", b))}
    if any(bad.values()):
        if problems is not None:
            problems.append(f"{name}: non-finite values (" + ", ".join(f"{side} {n}" for side, n in bad.items()) + ")")
        return math.inf
    return (a - b).abs().max().item() if a.numel() else 0.0


def label(field: str) -> str:
    """The name of a compared field in what `minialign parity` prints, its table's row numbering: hidden_0 ->
    "emb", hidden_{i} -> "layer {i-1}" (the output of layer i-1, row "i-1"), attention_{i} -> "layer {i} attention"
    (its attention column on row "i"), pooler_output -> "pooled"; any other field as it is."""
    if field.startswith("hidden_"):
        i = int(field[len("hidden_"):])
        return "emb" if i == 0 else f"layer {i - 1}"
    if field.startswith("attention_"):
        return f"layer {field[len('attention_'):]} attention"
    return "pooled" if field == "pooler_output" else field


def compare(reference, ours, real: torch.Tensor, problems: list[str] | None = None) -> dict[str, float]:
    """Max abs difference of each output two encoders share, on real tokens (`real`: (B, L) bool):
    hidden_{i} (0 = embeddings) and attention_{i} (real query rows) when both have them, in the order of the
    layers, then last_hidden_state, pooler_output and logits. The one comparison `minialign parity` prints and
    the tests assert. A field with a non-finite value on either side is inf (and named in `problems` by its
    `label`, first layer first). Raises ValueError when a shape or the number of layers differs."""
    diffs: dict[str, float] = {}

    def diff(name: str, a: torch.Tensor, b: torch.Tensor, rows=None) -> None:
        diffs[name] = difference(label(name), a, b, rows, problems)

    layers: dict[str, tuple] = {}
    for field in ("hidden_states", "attentions"):
        theirs, mine = getattr(reference, field, None), getattr(ours, field, None)
        if theirs is None or mine is None:
            continue
        if len(theirs) != len(mine):
            raise ValueError(f"{field}: reference has {len(theirs)}, minialign {len(mine)}")
        layers[field] = tuple(zip(theirs, mine))
    hidden, attentions = layers.get("hidden_states", ()), layers.get("attentions", ())
    for i in range(max(len(hidden), len(attentions) + 1)):  # the table's order: layer i-1's output, its attention
        if i < len(hidden):
            diff(f"hidden_{i}", *hidden[i], real)
        if 0 < i <= len(attentions):  # (B, H, L, L) -> (B, L, H, L): index real query rows
            a, b = attentions[i - 1]
            diff(f"attention_{i - 1}", a.transpose(1, 2), b.transpose(1, 2), real)
    for field, rows in (("last_hidden_state", real), ("pooler_output", None), ("logits", None)):
        theirs, mine = getattr(reference, field, None), getattr(ours, field, None)
        if theirs is not None and mine is not None:
            diff(field, theirs, mine, rows)
    return diffs


BACKENDS = ("eager", "sdpa", "flex")  # every attention backend (nn/attention.py BACKENDS)
LAYOUTS = {"padded": False, "packed": True}  # Encoder.forward's unpad


def run_parity(src: str, *, backbone: str | None = None, tolerance: float = 1e-4, backends=BACKENDS,
               layouts=tuple(LAYOUTS), echo=print) -> float:
    """Compare every run of minialign (each of `backends` on each of `layouts`: a padded batch, and packed
    with unpad=True) with transformers' eager model on the same inputs; print each layer's largest
    difference per run (attention probabilities from the eager padded run, the only one that returns them),
    every non-finite value named (the weights' first, by name); return the largest difference of all (inf for a
    non-finite value, in an output or a weight)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ValueError("minialign parity compares against transformers, which is not installed: "
                         f"{extra_hint('test')} (or pip install transformers)") from None
    unknown = [b for b in backends if b not in BACKENDS] + [x for x in layouts if x not in LAYOUTS]
    if unknown or not backends or not layouts:
        raise ValueError(f"parity runs backends among {BACKENDS} on layouts among {tuple(LAYOUTS)}, got "
                         f"{tuple(backends)} and {tuple(layouts)}")
    ckpt = read_checkpoint(src, backbone=backbone)
    cls = model_class(ckpt)
    classifier = cls is ClassifierModel
    with tempfile.TemporaryDirectory() as tmp:
        theirs, linears = _reference(src, ckpt, Path(tmp), classifier=classifier)
    batch = _inputs(ckpt)
    real = batch["attention_mask"].bool()
    _header(src, ckpt, batch, [_run(backend, layout) for backend in backends for layout in layouts], echo)
    # The weights first: both sides read the same file, so a NaN or infinity there is on both sides alike; the
    # comparison shows where it reaches (nothing, for a weight no input reaches), never which weight holds it.
    # Named as the file names it (read by minialign) and as transformers names it.
    heads = {f"{head}.{key}": t for head, linear in linears.items() for key, t in linear.state_dict().items()}
    weights = [f"minialign's weights: {said}" for said in non_finite_weights(ckpt.tensors, name=ckpt.own_name)]
    weights += [f"transformers' weights: {said}" for said in non_finite_weights(theirs.state_dict() | heads)]
    for problem in weights:
        echo(f"FAIL {problem}")
    with torch.no_grad():
        a = theirs(**batch, output_hidden_states=True, output_attentions=True)
    problems: list[str] = []
    diffs: dict[str, dict[str, float]] = {}  # run -> field -> difference
    for backend in backends:
        ours = build(cls, ckpt, attn_backend=backend)
        for layout in layouts:
            run = _run(backend, layout)
            probabilities = backend == "eager" and layout == "padded"  # any other run would fall back to eager
            with torch.no_grad():
                b = ours(**batch, output_hidden_states=True, output_attentions=probabilities, unpad=LAYOUTS[layout])
            said: list[str] = []
            diffs[run] = compare(a, b, real, said)
            if cls is AlignModel:
                for name, field in (("tri_layer", "tri_label_logits"), ("bin_layer", "seq_relationship_logits"),
                                    ("reg_layer", "reg_label_logits")):
                    if name in linears:  # a head the checkpoint lacks: minialign initialised it (and said so)
                        with torch.no_grad():
                            diffs[run][field] = difference(field, linears[name](a.pooler_output), getattr(b, field),
                                                           problems=said)
            problems += [f"{run}: {problem}" for problem in said]
    _table(ckpt, diffs, echo)
    for problem in problems:
        echo(f"FAIL {problem}")
    worst = max(d for run in diffs.values() for d in run.values())  # inf where a value is non-finite: never NaN
    verdict = "FAIL (non-finite weights)" if weights else "OK" if worst <= tolerance else "FAIL"
    echo(f"max abs difference {worst:.3e} over {len(diffs)} run(s) (tolerance {tolerance:g}): {verdict}")
    return math.inf if weights else worst


def _run(backend: str, layout: str) -> str:
    """A run's name in the header, the table's columns and the FAIL lines: "sdpa", "sdpa packed"."""
    return backend if layout == "padded" else f"{backend} {layout}"


def _header(src: str, ckpt, batch: dict[str, torch.Tensor], runs: list[str], echo) -> None:
    echo(f"source: {src}  arch: {ckpt.config.arch}  layers: {ckpt.config.num_layers}  "
         f"inputs: {tuple(batch['input_ids'].shape)}  runs: {', '.join(runs)}")


def _table(ckpt, diffs: dict[str, dict[str, float]], echo) -> None:
    """One row per layer (and per output after the last), one column per run; the eager padded run's attention.
    Rows are named by `label` (its layer number alone)."""
    runs = list(diffs)
    width = max(12, *map(len, runs))
    attention = "eager" in diffs and any(name.startswith("attention_") for name in diffs["eager"])
    echo(f"{'layer':>24}  " + "  ".join(f"{run:>{width}}" for run in runs) + ("  attention (eager)" if attention else ""))
    fields = [f"hidden_{i}" for i in range(ckpt.config.num_layers + 1)]
    fields += ["pooler_output", "logits", "tri_label_logits", "seq_relationship_logits", "reg_label_logits"]
    for field in fields:
        if not any(field in run for run in diffs.values()):
            continue
        cells = "  ".join(f"{_cell(diffs[run].get(field)):>{width}}" for run in runs)
        extra = ""
        if attention and field.startswith("hidden_") and field != "hidden_0":
            extra = f"  {_cell(diffs['eager'].get(f'attention_{int(field[7:]) - 1}')):>17}"
        echo(f"{label(field).removeprefix('layer '):>24}  {cells}{extra}")


def _cell(value: float | None) -> str:
    return "-" if value is None else "non-finite" if value == math.inf else f"{value:.3e}"
