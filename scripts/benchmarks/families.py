"""Encoder families: minialign against transformers, family by family, at each family's base shape
(random weights made by transformers, saved, and loaded by both from that directory), and MPNet
sentence embeddings against sentence-transformers on the real all-mpnet-base-v2."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import tempfile
from pathlib import Path

import torch

from minialign.models.encoder import Encoder
from minialign.nn.config import Config, families

from benchmarks.corpus import mixed_texts
from benchmarks.encoder import inputs, mixed_lengths
from benchmarks.machine import interleaved

# Each family at the preset of its base model (convert/families/<family>.py: each preset cites the config.json it
# mirrors), in the table's order; a family minialign does not declare yet is left out.
SHAPES = {"bert": "bert-base-uncased", "roberta": "roberta-base", "xlm-roberta": "xlm-roberta-base",
          "electra": "electra-base-discriminator", "distilbert": "distilbert-base-uncased", "mpnet": "mpnet-base",
          "deberta-v2": "deberta-v3-base", "modernbert": "modernbert-base", "gte": "gte-base-en-v1.5",
          "nomic_bert": "nomic-embed-text-v1.5", "jina_embeddings_v3": "jina-embeddings-v3",
          "eurobert": "eurobert-210m"}
KNOWN = ("bert", "roberta")  # the families measured before: the reference rows; the others carry the goal
GOAL = 1.5  # the goal for each new family (unless GOALS says otherwise) and for MPNet embeddings
# Their own goals: DeBERTa at least 2x (transformers runs it eager and padded), ModernBERT 1.3x (its sdpa).
GOALS = {"deberta-v2": 2.0, "modernbert": 1.3}
SEQUENCES, LO, HI = 16, 8, 256
LENGTHS = mixed_lengths(SEQUENCES, lo=LO, hi=HI)  # one mixed-length batch, right-padded (encoder.py's seeded mix)
PATH = "sdpa, unpad=True (packed)"  # minialign's path: the encoder section's fastest fp32 CPU row, "minialign unpadded"
MPNET_ENV = "MINIALIGN_BENCH_MPNET"  # where the real all-mpnet-base-v2 is, unless --mpnet names it

TABLE = {"family": "", "shape": "", "transformers attention": "", "transformers tokens/s": ".0f",
         "minialign path": "", "minialign tokens/s": ".0f", "minialign / transformers": ".2f", "goal": "",
         "max abs diff": ".1e"}
EMBEDDING_TABLE = {"model": "", "texts": "", "impl": "", "texts/s": ".1f", "speed-up": ".2f", "max abs diff": ".1e",
                   "min cosine": ".6f"}


def configs() -> dict[str, Config]:
    """The families to time, each at its base preset."""
    return {arch: Config.from_name(name) for arch, name in SHAPES.items() if arch in families()}


def transformers_model(directory: str):
    """(transformers' bare model from `directory` in eval mode, its attention as the table says it):
    sdpa, or the family's default where transformers refuses sdpa for it (MPNet)."""
    from transformers import AutoModel

    try:
        return AutoModel.from_pretrained(directory, attn_implementation="sdpa").eval(), "sdpa"
    except ValueError:  # "... does not support an attention implementation through ... scaled_dot_product_attention"
        model = AutoModel.from_pretrained(directory).eval()
        return model, f"{model.config._attn_implementation} (no sdpa in transformers)"


def time_family(config: Config, *, reps: int, lengths: list[int]) -> tuple[str, dict[str, list[float]], float]:
    """(transformers' attention, each side's seconds per round, the largest difference of the last hidden
    states on real tokens): a random model of `config` made by transformers, saved, and loaded by both."""
    from transformers import AutoConfig, AutoModel

    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        AutoModel.from_config(AutoConfig.for_model(**config.to_hf())).save_pretrained(tmp)
        theirs, attention = transformers_model(tmp)
        ours = Encoder.from_pretrained(tmp)  # fp32, the sdpa backend
    ids, mask = inputs(config, lengths)
    calls = {"transformers": lambda: theirs(input_ids=ids, attention_mask=mask).last_hidden_state,
             "minialign": lambda: ours(ids, attention_mask=mask, unpad=True).last_hidden_state}
    times, outputs = {}, {}
    with torch.inference_mode():
        interleaved(calls, rounds=reps, times=times, outputs=outputs)
    real = mask.bool()
    return attention, times, (outputs["minialign"][real] - outputs["transformers"][real]).abs().max().item()


def measure_encoders(*, reps: int, families: dict[str, Config] | None = None, lengths: list[int] = LENGTHS,
                     echo=print) -> list[dict]:
    """One row per family: tokens/s (real tokens, median of `reps` interleaved rounds after a warm-up) of
    transformers and of minialign on the same batch and weights, fp32, and the largest difference of
    their last hidden states on real tokens."""
    rows = []
    for arch, config in (families or configs()).items():
        attention, times, diff = time_family(config, reps=reps, lengths=lengths)
        rate = {label: sum(lengths) / statistics.median(seconds) for label, seconds in times.items()}
        ratio = rate["minialign"] / rate["transformers"]
        least = GOALS.get(arch, GOAL)
        goal = "(reference)" if arch in KNOWN else f">= {least}x: " + ("met" if ratio >= least else "not met")
        preset = SHAPES.get(arch)
        shape = preset if preset and config == Config.from_name(preset) else "custom"
        rows.append({"family": arch, "shape": shape, "transformers attention": attention,
                     "transformers tokens/s": rate["transformers"], "minialign path": PATH,
                     "minialign tokens/s": rate["minialign"], "minialign / transformers": ratio, "goal": goal,
                     "max abs diff": diff})
        echo(f"families {arch:12} transformers {attention}: {rate['transformers']:7.0f} tok/s  minialign {PATH}: "
             f"{rate['minialign']:7.0f} tok/s  x{ratio:.2f}  max|diff| {diff:.1e}")
    return rows


def mpnet_source(directory: str | None) -> tuple[Path | None, str]:
    """(the sentence-transformers MPNet directory, "") or (None, why the embeddings row is skipped)."""
    if "mpnet" not in families():
        return None, "minialign does not run mpnet yet"
    directory = directory or os.environ.get(MPNET_ENV)
    if not directory:
        return None, f"no all-mpnet-base-v2 directory: pass --mpnet DIR or set {MPNET_ENV}"
    path = Path(directory)
    try:
        model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError) as error:
        return None, f"{path}: no readable config.json ({type(error).__name__})"
    if model_type != "mpnet" or not (path / "modules.json").is_file():
        return None, f"{path}: not a sentence-transformers MPNet directory (model_type {model_type!r})"
    if importlib.util.find_spec("sentence_transformers") is None:
        return None, "sentence-transformers not installed"
    return path, ""


def measure_embeddings(*, directory: Path, texts: int, reps: int, echo=print) -> list[dict]:
    """SentenceEncoder.encode against SentenceTransformer.encode (batch size 32 both, fp32 CPU) on `texts`
    mixed-length texts (the embeddings section's), median of `reps` interleaved rounds after a warm-up;
    the differences are against sentence-transformers' embeddings of the last round."""
    from sentence_transformers import SentenceTransformer

    from minialign.products.embeddings import SentenceEncoder

    batch = mixed_texts(texts)
    reference = SentenceTransformer(str(directory), device="cpu")
    ours = SentenceEncoder.from_pretrained(directory)  # fp32, unpad=True
    calls = {"SentenceTransformer.encode": lambda: torch.as_tensor(reference.encode(batch, batch_size=32)),
             "SentenceEncoder.encode": lambda: ours.encode(batch, batch_size=32)}
    times, outputs = {}, {}
    with torch.inference_mode():
        interleaved(calls, rounds=reps, times=times, outputs=outputs)
    peer = "SentenceTransformer.encode"
    seconds = {label: statistics.median(values) for label, values in times.items()}
    rows = []
    for label, out in outputs.items():
        diff = (out - outputs[peer]).abs().max().item()
        cosine = torch.nn.functional.cosine_similarity(out, outputs[peer]).min().item()
        rows.append({"model": directory.name, "texts": texts, "impl": label, "texts/s": texts / seconds[label],
                     "speed-up": seconds[peer] / seconds[label], "max abs diff": diff, "min cosine": cosine})
        echo(f"families {directory.name} {label:27} {texts / seconds[label]:7.1f} texts/s  "
             f"x{seconds[peer] / seconds[label]:.2f}  max|diff| {diff:.1e}  min cos {cosine:.6f}")
    return rows


def measure(*, reps: int, texts: int, mpnet: str | None = None, families: dict[str, Config] | None = None,
            lengths: list[int] = LENGTHS, echo=print) -> tuple[list[dict], list[dict], str]:
    """(the family rows, the MPNet embedding rows, why those are skipped: "" when they are not)."""
    rows = measure_encoders(reps=reps, families=families, lengths=lengths, echo=echo)
    directory, skipped = mpnet_source(mpnet)
    if directory is None:
        echo(f"families: MPNet embeddings skipped: {skipped}")
        return rows, [], skipped
    return rows, measure_embeddings(directory=directory, texts=texts, reps=reps, echo=echo), ""
