"""HF `config.json` <-> minialign config fields, as plain dicts: the machinery over one ConfigRow per family.

Each family's row is in its own file, convert/families/<family>.py (with its weight names; by_model_type.py
finds a row by model_type): what its
config.json looks like (transformers configuration_<family>.py): its field names, its defaults, the
transformers classes to name, the fields written back, the presets it owns, and the one config-level
fact of its position table (RoBERTa's positions start after pad_token_id: the table holds that many
fewer positions). A family derives its row from the nearest one (`dataclasses.replace`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Iterable
from typing import Any

from .errors import CheckpointError

@dataclass(frozen=True)
class ConfigRow:
    """One family's config.json, as transformers writes it."""

    model_type: str  # config.json "model_type" (and Config.arch)
    base_class: str  # the bare encoder's transformers class (config.json "architectures")
    classifier_class: str  # its *ForSequenceClassification

    @property
    def masked_lm_class(self) -> str:
        """Its *ForMaskedLM (BertModel -> BertForMaskedLM: every family names it so)."""
        return self.base_class.removesuffix("Model") + "ForMaskedLM"
    fields: dict[str, str]  # HF field -> minialign Config field
    defaults: dict[str, Any]  # HF defaults for fields an old config.json may leave out (<Family>Config.__init__)
    written: dict[str, Any] = field(default_factory=dict)  # further HF fields written back as they are
    positions_after_pad: bool = False  # position ids start at pad_token_id + 1 (fairseq's make_positions)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> the HF config.json it mirrors
    unset_as: dict[str, str] = field(default_factory=dict)  # HF field written as another when its value is None
    # config.json in a newer spelling -> the spelling `fields` names (ModernBERT's rope_parameters / layer_types)
    read: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # the reverse of `read`: the config.json `fields` name -> its newer spelling (GTE's rope_parameters)
    write: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # custom code the family's transformers classes port: auto_map entries ("module.Class", after any "repo--")
    # a config.json of this model_type may name and still be this family's (NomicBERT's Hub checkpoints)
    ported_code: tuple[str, ...] = ()

    def reserved_positions(self, pad_token_id: int) -> int:
        """Rows of the position table no token's position can use (Config.max_seq_len)."""
        return pad_token_id + 1 if self.positions_after_pad else 0


SIZES_OURS = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size")  # every row maps these


def sizes(hidden: int, layers: int, heads: int, intermediate: int) -> dict[str, Any]:
    """A preset's sizes under BERT's config.json names."""
    return {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": intermediate}


def default_rope(hf: dict[str, Any]) -> dict[str, Any]:
    """config.json with its rotary base as `rope_theta`: transformers 5 writes it as rope_parameters {"rope_type",
    "rope_theta"} (modeling_rope_utils.py convert_rope_params_to_dict), the Hub's files as rope_theta beside
    rope_scaling (null where the rotary is the default). A rope type other than "default" in either (a scaled
    rotary) is refused, naming the field: the families reading it run the default rotary only (EuroBERT, Qwen 2 / 3,
    jina-embeddings-v3)."""
    hf = dict(hf)
    rope = hf.get("rope_parameters")
    if isinstance(rope, dict):
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"config.json: rope_parameters rope_type {rope['rope_type']!r} is not supported "
                             f"(only 'default')")
        if rope.get("rope_theta") is not None:
            hf["rope_theta"] = rope["rope_theta"]
    scaling = hf.get("rope_scaling")
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) != "default":
        raise ValueError(f"config.json: rope_scaling {scaling!r} is not supported (only the default rotary: "
                         f"rope_scaling null)")
    return hf


def _architecture(hf: dict[str, Any]) -> str:
    """What a config.json says its model is: `architectures`, else the classes its auto_map names."""
    names = hf.get("architectures") or []
    if not names and isinstance(hf.get("auto_map"), dict):
        names = list(hf["auto_map"].values())
    return ", ".join(map(str, names if isinstance(names, list) else [names])) or "no architectures field"


# Custom code that transformers has since ported into a native family, by the code's hub repository (an auto_map
# value "repo--module.Class") or, for code kept beside the weights ("module.Class"), by its class: the native
# model_type, and a published checkpoint of it under that model_type where one exists (each family's docstring in
# transformers models/<model_type>/configuration_*.py names it). transformers' native class reads the code's
# weight names (conversion_mapping.py; save_pretrained writes them back). A config.json under that model_type whose
# auto_map names only the code its family ports (ConfigRow.ported_code) is read as that family; under another one this
# table names the native model_type in the refusal.
NATIVE_PORTS: dict[str, tuple[str, str | None]] = {
    "Alibaba-NLP/new-impl": ("gte", "alibaba-nlp-community/gte-multilingual-base"),  # gte-v1.5, gte-multilingual
    "nomic-ai/nomic-bert-2048": ("nomic_bert", None),  # nomic-embed-text v1 / v1.5
    "jinaai/xlm-roberta-flash-implementation": ("jina_embeddings_v3", "jinaai/jina-embeddings-v3-hf"),
    "EuroBertModel": ("eurobert", None),  # EuroBERT/EuroBERT-210m ...: modeling_eurobert.py beside the weights
}


def native_port(auto_map: Any) -> tuple[str, str, str | None] | None:
    """(the code it names, the native model_type, a published native checkpoint or None) for an auto_map whose
    code transformers ships natively (NATIVE_PORTS); None otherwise."""
    references = auto_map.values() if isinstance(auto_map, dict) else [auto_map]
    references = [r for entry in references for r in (entry if isinstance(entry, list) else [entry]) if r is not None]
    for reference in map(str, references):
        code, _, local = reference.partition("--") if "--" in reference else ("", "", reference)
        for key in (code, local.rpartition(".")[2]):
            if key in NATIVE_PORTS:
                return (code or local, *NATIVE_PORTS[key])
    return None


def refuse_foreign(hf: dict[str, Any], *, supported: Iterable[str], source: str = "config.json",
                   ported: Iterable[str] = ()) -> None:
    """A CheckpointError for a config.json minialign cannot run: custom code (an `auto_map`, whatever
    its model_type says: jina-embeddings-v2 says "bert" but is ALiBi + GLU) or an unknown model_type;
    the message names the architecture and the supported families. An auto_map naming only classes of `ported`
    (the model_type's ConfigRow.ported_code: code its transformers classes port, as NomicBERT's Hub checkpoints
    name) is that family's; other custom code that transformers ships natively (NATIVE_PORTS) is refused naming
    the native model_type."""
    supported, ported = tuple(supported), tuple(ported)
    names = ", ".join(map(repr, supported))
    auto_map = hf.get("auto_map")
    if auto_map and not _only_ported(auto_map, ported):
        port = native_port(auto_map)
        if port is not None and port[1] == hf.get("model_type"):
            classes = [str(c) for c in (auto_map.values() if isinstance(auto_map, dict) else [auto_map])]
            raise CheckpointError(
                f"{source}: its auto_map names {', '.join(classes)}: code of {port[0]}, which transformers' "
                f"{port[1]} ports, but not only the classes minialign's {port[1]} declares it reads "
                f"({', '.join(ported) or 'none'}; convert/families/{port[1]}.py ported_code); minialign does not run a "
                f"checkpoint's own code")
        if port is not None:
            code, native, published = port
            where = (f"load {published}, its checkpoint under that model_type, or " if published else "") + \
                f"write config.json in transformers' {native} fields with model_type {native!r} over the same weights"
            runs = "minialign runs it natively as" if native in supported else "transformers runs it natively as"
            raise CheckpointError(
                f"{source}: {_architecture(hf)} is custom code (auto_map names {code}); {runs} model_type {native!r} "
                f"(transformers models/{native}, which reads this code's weight names): {where}. minialign does not "
                f"run a checkpoint's own code (model_type here: {hf.get('model_type')!r})")
        classes = ", ".join(f"{k} -> {v}" for k, v in auto_map.items()) if isinstance(auto_map, dict) else auto_map
        raise CheckpointError(
            f"{source}: {_architecture(hf)} is custom code (auto_map: {classes}); minialign does not run a "
            f"checkpoint's own code, and its model_type {hf.get('model_type')!r} does not describe that "
            f"architecture (minialign runs the transformers families {names})")
    arch = hf.get("model_type")
    if not isinstance(arch, str) or arch not in supported:
        raise CheckpointError(f"{source}: model_type {arch!r} ({_architecture(hf)}) is not supported; "
                              f"minialign runs {names}")


def _only_ported(auto_map: Any, ported: Iterable[str]) -> bool:
    """Whether every class an auto_map names is one of `ported` ("module.Class", after any "repo--"): custom code
    its model_type's transformers classes port (ConfigRow.ported_code), so the checkpoint is that family's."""
    ported = tuple(ported)
    if not ported or not isinstance(auto_map, dict):
        return False
    classes = [value for entry in auto_map.values() for value in (entry if isinstance(entry, list) else [entry])
               if value is not None]  # AutoTokenizer's [slow, fast] pairs hold None for a missing one
    return all(isinstance(c, str) and c.split("--")[-1] in ported for c in classes)


def fields_from_hf(hf: dict[str, Any], row: ConfigRow, *, source: str = "config.json",
                   supported: Iterable[str] = ()) -> dict[str, Any]:
    """Map an HF config dict of `row`'s family to minialign field names. Custom code, or a model_type
    other than the row's, is refused first (`refuse_foreign`; `supported`: the families to name besides
    the row's)."""
    refuse_foreign(hf, source=source, supported=dict.fromkeys((*supported, row.model_type)),
                   ported=row.ported_code if hf.get("model_type") == row.model_type else ())
    if hf.get("model_type") != row.model_type:
        raise ValueError(f"{source}: model_type {hf.get('model_type')!r} is not {row.model_type!r}")
    arch = row.model_type
    if row.read is not None:
        hf = row.read(hf)
    missing = [k for k, dst in row.fields.items() if dst in SIZES_OURS and k not in hf]  # the row's names
    if missing:
        own = (f"; its auto_map's code writes config.json in names of its own, transformers' {row.model_type} "
               f"reads these") if hf.get("auto_map") else ""
        raise ValueError(f"{source}: missing field(s) {missing}{own}")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"{source}: position_embedding_type {position_type!r} is not supported (only 'absolute')")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ValueError(f"{source}: decoder / cross-attention configs are not supported (minialign is an encoder)")
    merged = {**row.defaults, **{k: v for k, v in hf.items() if v is not None}}
    out = {dst: merged[src] for src, dst in row.fields.items() if src in merged}
    out["arch"] = arch
    out["labels"] = labels_from_hf(hf, source=source)
    for name in ("problem_type", "classifier_dropout"):
        if hf.get(name) is not None:
            out[name] = hf[name]
    if hf.get("pruned_heads"):  # PretrainedConfig (v4): {"3": [0, 2]}; checked by the config's rule
        out["pruned_heads"] = hf["pruned_heads"]
    return out


def labels_from_hf(hf: dict[str, Any], *, source: str = "config.json") -> list[str]:
    """Label names by index from `id2label` (JSON keys are strings) or `num_labels` (LABEL_i, as
    transformers names them); none when the config has neither."""
    id2label = hf.get("id2label")
    if id2label:
        try:
            by_index = {int(k): str(v) for k, v in id2label.items()}
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"{source}: id2label must map label indices to names, got {id2label!r}") from None
        if sorted(by_index) != list(range(len(by_index))):
            raise ValueError(f"{source}: id2label indices must be 0..{len(by_index) - 1}, got {sorted(by_index)}")
        return [by_index[i] for i in range(len(by_index))]
    n = hf.get("num_labels")
    return [f"LABEL_{i}" for i in range(n)] if isinstance(n, int) and n > 0 else []


def fields_to_hf(fields: dict[str, Any], row: ConfigRow, *, classifier: bool = False) -> dict[str, Any]:
    """Map minialign config fields of `row`'s family back to an HF config dict (Format.hf_config, Config.to_hf)."""
    hf = {src: list(fields[dst]) if isinstance(fields[dst], tuple) else fields[dst]  # JSON's lists (pos_att_type)
          for src, dst in row.fields.items() if fields.get(dst) is not None}
    for src, other in row.unset_as.items():
        hf.setdefault(src, hf[other])
    if fields.get("labels"):
        hf["id2label"] = {str(i): label for i, label in enumerate(fields["labels"])}
        hf["label2id"] = {label: i for i, label in enumerate(fields["labels"])}
    for name in ("problem_type", "classifier_dropout"):
        if fields.get(name) is not None:
            hf[name] = fields[name]
    if fields.get("pruned_heads"):  # (layer, heads) pairs -> transformers v4's {"3": [0, 2]}
        hf["pruned_heads"] = {str(layer): list(heads) for layer, heads in fields["pruned_heads"]}
    hf.update(model_type=row.model_type, architectures=[row.classifier_class if classifier else row.base_class],
              **row.written)
    return hf if row.write is None else row.write(hf)

