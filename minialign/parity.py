"""Parity check: load one checkpoint in minialign and in transformers, run the same inputs
through both, print the max abs difference per layer. Needs transformers (the `test` extra).

The transformers side reads the source with transformers' own loader where one exists (an HF
directory or hub id: AutoModel; an AlignScore .ckpt: the `base_model.` weights into AutoModel and
nn.Linear heads), so a bug in minialign's name tables shows up as a difference. A minialign
directory has no foreign original; it is exported to HF layout first.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from . import convert

from .loading import HEADS_FILE, build, export_hf, read_checkpoint
from .model import AlignModel, Encoder
from .tokenizer import Tokenizer

SAMPLE_PAIRS = [
    ("The Eiffel Tower was completed in 1889 for the World's Fair in Paris.", "The tower opened in 1889."),
    ("Marie Curie won two Nobel Prizes, in physics and in chemistry.", "Curie won a Nobel Prize."),
    ("A short one.", "Another sentence that is a little longer than the first one, to force padding."),
]
HEADS = ("bin_layer", "tri_layer", "reg_layer")


def _reference(src: str, ckpt, tmp: Path):
    """(transformers backbone in eager mode, {head: nn.Linear} from the source's own weights)."""
    from transformers import AutoConfig, AutoModel

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


def run_parity(src: str, *, backbone: str | None = None, tolerance: float = 1e-4, echo=print) -> float:
    """Print per-layer differences; return the largest one."""
    ckpt = read_checkpoint(src, backbone=backbone)
    has_heads = all(f"{h}.weight" in ckpt.tensors for h in HEADS)
    ours = build(AlignModel if has_heads else Encoder, ckpt, attn_backend="eager")
    with tempfile.TemporaryDirectory() as tmp:
        theirs, linears = _reference(src, ckpt, Path(tmp))
    batch = _inputs(ckpt)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        a = theirs(**batch, output_hidden_states=True, output_attentions=True)
        b = ours(**batch, output_hidden_states=True, output_attentions=True)
    diffs: dict[str, float] = {}
    echo(f"source: {src}  arch: {ckpt.config.arch}  layers: {ckpt.config.num_layers}  "
         f"inputs: {tuple(batch['input_ids'].shape)}")
    echo(f"{'layer':>8}  {'hidden':>10}  {'attention':>10}")
    for i, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states)):
        hidden = (x - y)[real].abs().max().item()
        attn = "-"
        diffs[f"hidden_{i}"] = hidden
        if i > 0:
            p, q = a.attentions[i - 1], b.attentions[i - 1]
            att = (p - q).permute(0, 2, 1, 3)[real].abs().max().item()  # real query rows
            diffs[f"attention_{i - 1}"] = att
            attn = f"{att:.3e}"
        echo(f"{'emb' if i == 0 else i - 1:>8}  {hidden:>10.3e}  {attn:>10}")
    diffs["pooler_output"] = (a.pooler_output - b.pooler_output).abs().max().item()
    echo(f"{'pooled':>8}  {diffs['pooler_output']:>10.3e}")
    if has_heads and linears:
        pooled = a.pooler_output
        for name, field in (("tri_layer", "tri_label_logits"), ("bin_layer", "seq_relationship_logits"),
                            ("reg_layer", "reg_label_logits")):
            with torch.no_grad():
                d = (linears[name](pooled) - getattr(b, field)).abs().max().item()
            diffs[field] = d
            echo(f"{field:>24}  {d:.3e}")
    worst = max(diffs.values())
    echo(f"max abs difference {worst:.3e} (tolerance {tolerance:g}): {'OK' if worst <= tolerance else 'FAIL'}")
    return worst
