"""Parity check: load one checkpoint in minialign and in transformers, run the same inputs
through both, print the max abs difference per layer. Needs transformers (the `test` extra).

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


def compare(reference, ours, real: torch.Tensor, problems: list[str] | None = None) -> dict[str, float]:
    """Max abs difference of each output two encoders share, on real tokens (`real`: (B, L) bool):
    last_hidden_state, pooler_output, hidden_{i} (0 = embeddings) and attention_{i} (real query
    rows) when both have them. The one comparison `minialign parity` prints and the tests assert.
    A field with a non-finite value on either side is inf (and named in `problems`). Raises ValueError
    when a shape or the number of layers differs."""
    diffs: dict[str, float] = {}

    def diff(name: str, a: torch.Tensor, b: torch.Tensor, rows=None) -> None:
        diffs[name] = difference(name, a, b, rows, problems)

    for field, rows in (("last_hidden_state", real), ("pooler_output", None), ("logits", None)):
        theirs, mine = getattr(reference, field, None), getattr(ours, field, None)
        if theirs is not None and mine is not None:
            diff(field, theirs, mine, rows)
    for field, name in (("hidden_states", "hidden"), ("attentions", "attention")):
        theirs, mine = getattr(reference, field, None), getattr(ours, field, None)
        if theirs is None or mine is None:
            continue
        if len(theirs) != len(mine):
            raise ValueError(f"{field}: reference has {len(theirs)}, minialign {len(mine)}")
        for i, (a, b) in enumerate(zip(theirs, mine)):
            if field == "attentions":  # (B, H, L, L) -> (B, L, H, L): index real query rows
                a, b = a.transpose(1, 2), b.transpose(1, 2)
            diff(f"{name}_{i}", a, b, real)
    return diffs


BACKENDS = ("eager", "sdpa", "flex")  # every attention backend (nn/attention.py BACKENDS)
LAYOUTS = {"padded": False, "packed": True}  # Encoder.forward's unpad


def run_parity(src: str, *, backbone: str | None = None, tolerance: float = 1e-4, backends=BACKENDS,
               layouts=tuple(LAYOUTS), echo=print) -> float:
    """Compare every run of minialign (each of `backends` on each of `layouts`: a padded batch, and packed
    with unpad=True) with transformers' eager model on the same inputs; print each layer's largest
    difference per run (attention probabilities from the eager padded run, the only one that returns them),
    every non-finite value named; return the largest difference of all (inf for a non-finite value)."""
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
    with torch.no_grad():
        a = theirs(**batch, output_hidden_states=True, output_attentions=True)
    problems: list[str] = []
    diffs: dict[str, dict[str, float]] = {}  # run -> field -> difference
    for backend in backends:
        ours = build(cls, ckpt, attn_backend=backend)
        for layout in layouts:
            run = backend if layout == "padded" else f"{backend} {layout}"
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
    _report(src, ckpt, batch, diffs, echo)
    for problem in problems:
        echo(f"FAIL {problem}")
    worst = max(d for run in diffs.values() for d in run.values())  # inf where a value is non-finite: never NaN
    echo(f"max abs difference {worst:.3e} over {len(diffs)} run(s) (tolerance {tolerance:g}): "
         f"{'OK' if worst <= tolerance else 'FAIL'}")
    return worst


def _report(src: str, ckpt, batch: dict[str, torch.Tensor], diffs: dict[str, dict[str, float]], echo) -> None:
    """One row per layer (and per output after the last), one column per run; the eager padded run's attention."""
    runs = list(diffs)
    echo(f"source: {src}  arch: {ckpt.config.arch}  layers: {ckpt.config.num_layers}  "
         f"inputs: {tuple(batch['input_ids'].shape)}  runs: {', '.join(runs)}")
    width = max(12, *map(len, runs))
    attention = "eager" in diffs and any(name.startswith("attention_") for name in diffs["eager"])
    echo(f"{'layer':>24}  " + "  ".join(f"{run:>{width}}" for run in runs) + ("  attention (eager)" if attention else ""))
    rows = [(("emb" if i == 0 else str(i - 1)), f"hidden_{i}") for i in range(ckpt.config.num_layers + 1)]
    rows += [("pooled", "pooler_output"), *((field, field) for field in ("logits", "tri_label_logits",
                                                                        "seq_relationship_logits", "reg_label_logits"))]
    for label, field in rows:
        if not any(field in run for run in diffs.values()):
            continue
        cells = "  ".join(f"{_cell(diffs[run].get(field)):>{width}}" for run in runs)
        extra = ""
        if attention and field.startswith("hidden_") and field != "hidden_0":
            extra = f"  {_cell(diffs['eager'].get(f'attention_{int(field[7:]) - 1}')):>17}"
        echo(f"{label:>24}  {cells}{extra}")


def _cell(value: float | None) -> str:
    return "-" if value is None else "non-finite" if value == math.inf else f"{value:.3e}"
