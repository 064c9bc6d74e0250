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

from minialign.loading import HEADS_FILE, build, export_hf, read_checkpoint
from minialign.models.auto import model_class
from minialign.models.encoder import AlignModel, ClassifierModel
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


def run_parity(src: str, *, backbone: str | None = None, tolerance: float = 1e-4, echo=print) -> float:
    """Print per-layer differences; return the largest one."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ValueError("minialign parity compares against transformers, which is not installed: "
                         "pip install 'minialign[test]' (or pip install transformers)") from None
    ckpt = read_checkpoint(src, backbone=backbone)
    cls = model_class(ckpt)
    classifier = cls is ClassifierModel
    ours = build(cls, ckpt, attn_backend="eager")
    with tempfile.TemporaryDirectory() as tmp:
        theirs, linears = _reference(src, ckpt, Path(tmp), classifier=classifier)
    batch = _inputs(ckpt)
    with torch.no_grad():
        a = theirs(**batch, output_hidden_states=True, output_attentions=True)
        b = ours(**batch, output_hidden_states=True, output_attentions=True)
    problems: list[str] = []
    diffs = compare(a, b, batch["attention_mask"].bool(), problems)
    echo(f"source: {src}  arch: {ckpt.config.arch}  layers: {ckpt.config.num_layers}  "
         f"inputs: {tuple(batch['input_ids'].shape)}")
    echo(f"{'layer':>8}  {'hidden':>10}  {'attention':>10}")
    for i in range(ckpt.config.num_layers + 1):
        attn = f"{diffs[f'attention_{i - 1}']:.3e}" if i > 0 else "-"
        echo(f"{'emb' if i == 0 else i - 1:>8}  {diffs[f'hidden_{i}']:>10.3e}  {attn:>10}")
    if "pooler_output" in diffs:
        echo(f"{'pooled':>8}  {diffs['pooler_output']:>10.3e}")
    if classifier:
        echo(f"{'logits':>8}  {diffs['logits']:>10.3e}")
    if cls is AlignModel:
        pooled = a.pooler_output
        for name, field in (("tri_layer", "tri_label_logits"), ("bin_layer", "seq_relationship_logits"),
                            ("reg_layer", "reg_label_logits")):
            if name not in linears:
                continue  # a head the checkpoint lacks: minialign initialised it (and said so), nothing to compare
            with torch.no_grad():
                d = difference(field, linears[name](pooled), getattr(b, field), problems=problems)
            diffs[field] = d
            echo(f"{field:>24}  {d:.3e}")
    for problem in problems:
        echo(f"FAIL {problem}")
    worst = max(diffs.values())  # inf where a value is non-finite (difference): never a NaN
    echo(f"max abs difference {worst:.3e} (tolerance {tolerance:g}): {'OK' if worst <= tolerance else 'FAIL'}")
    return worst
