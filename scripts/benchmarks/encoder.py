"""Encoder forward: minialign's backends and layouts against transformers (eager, sdpa) and ONNX
Runtime on one model's weights, with the matmul ceiling timed in the same rounds."""

from __future__ import annotations

import random
import tempfile
import warnings

import torch
import torch.nn.functional as F

from minialign import convert
from minialign.nn.config import DTYPES, Config
from minialign.nn.linear import Linear
from minialign.models.encoder import Encoder

from benchmarks.fixtures import ROBERTA_BASE
from benchmarks.machine import interleaved

TABLE = {"model": "", "dtype": "", "batch": "", "impl": "", "tokens/s": ".0f", "vs hf sdpa": ".2f", "GFLOP/s": ".1f",
         "of ceiling": ".0%"}

# (tokens, in, out) of the ceiling matmul. CPU: roberta-base's feed-forward up-projection at 2048
# tokens (a larger square matmul runs slower than that on a small-cache CPU, understating the
# ceiling). GPU: a large square matmul, the usual peak reference.
CEILING_SHAPE = {"cpu": (2048, 768, 3072), "cuda": (8192, 8192, 8192)}
BACKENDS = ("eager", "sdpa", "flex", "sdpa compiled")  # minialign's runs; `compiled`: model.compile()


def ceiling_matmul(dtype: torch.dtype, device: str = "cpu", ceiling_shape: tuple[int, int, int] | None = None):
    """(calls, FLOPs): one product at CEILING_SHAPE through torch's F.linear and through minialign's
    Linear (oneDNN with a prepacked weight for CPU fp32 inference, linear.py). The encoder benchmark
    times them in the same rounds as the models, so they see the same machine state; the best rate of
    the faster is the ceiling."""
    m, k, n = ceiling_shape or CEILING_SHAPE[torch.device(device).type]
    x = torch.randn(m, k, dtype=dtype, device=device)
    linear = Linear(k, n, bias=False).to(device=device, dtype=dtype)
    return {"F.linear": lambda: F.linear(x, linear.weight), "minialign Linear": lambda: linear(x)}, 2 * m * k * n


def onnxruntime_encoder(hf_model, config: Config, threads: int):
    """A transformers encoder exported with torch.onnx (the TorchScript exporter, dynamic batch and
    length) and loaded in ONNX Runtime's CPU provider with `threads` intra-op threads and its default
    graph optimizations; returns (ids, mask) -> last hidden state, or None without onnxruntime."""
    try:
        import onnxruntime
    except ImportError:
        return None

    class LastHidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids, mask = inputs(config, [16, 9])
    axes = {0: "batch", 1: "length"}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = f"{tmp}/encoder.onnx"
        torch.onnx.export(LastHidden(hf_model), (ids, mask), path, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda ids, mask: session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]


def encoder_flops(config: Config, lengths: list[int]) -> float:
    """Forward FLOPs on real tokens: projections and feed-forward 2*(4C^2 + 2CI) per token, attention
    4*L*C per token, per layer (multiply-add = 2 FLOPs)."""
    c, i = config.hidden_size, config.intermediate_size
    per_token = 2 * (4 * c * c + 2 * c * i)
    return config.num_layers * sum(n * per_token + 4 * n * n * c for n in lengths)


def runner_flops(runner, texts: list[str], pairs: list[str] | None = None) -> float:
    """encoder_flops of what `runner` (any minialign runner) computes for `texts` (and `pairs`): each input's real
    tokens under the runner's window and truncation, so a share of the ceiling counts useful work only."""
    encoded = runner.tokenizer.encode_ids(texts, pairs, max_length=runner.engine.max_length)
    return encoder_flops(runner.model.config, [len(ids) for ids in encoded.ids])


def mixed_lengths(n: int, *, lo: int = 24, hi: int = 512, seed: int = 0) -> list[int]:
    """n seeded sequence lengths of lo..hi tokens, longest first: a mixed-length batch."""
    rng = random.Random(seed)
    return sorted((rng.randint(lo, hi) for _ in range(n)), reverse=True)


def encoder_batches(device: str, seed: int = 0) -> dict[str, list[int]]:
    """Sequence lengths per batch: padded batches and a mixed-length one (24-512 tokens)."""
    if torch.device(device).type == "cuda":
        return {"64x512": [512] * 64, "mixed 64": mixed_lengths(64, seed=seed)}
    return {"4x128": [128] * 4, "4x512": [512] * 4, "mixed 8": mixed_lengths(8, seed=seed)}


def inputs(config: Config, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (B, max length), right-padded to each sequence's length, and their mask."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(config.pad_token_id + 1, config.vocab_size, (len(lengths), max(lengths)), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return ids.masked_fill(mask == 0, config.pad_token_id), mask


def hf_encoder(config: Config, implementation: str, dtype: torch.dtype, state_dict: dict, device: str = "cpu"):
    """transformers' model of the config's family with `implementation` attention, holding state_dict."""
    from transformers import AutoConfig, AutoModel

    hf = AutoModel.from_config(AutoConfig.for_model(**config.to_hf()), attn_implementation=implementation)
    hf.load_state_dict(state_dict, strict=False)
    return hf.to(device=device, dtype=dtype).eval()


def measure(*, reps: int, dtypes: list[str], config: Config = ROBERTA_BASE, model_name: str = "roberta-base",
            device: str = "cpu", batches: dict[str, list[int]] | None = None, backends: tuple[str, ...] = BACKENDS,
            ceiling_shape: tuple[int, int, int] | None = None, echo=print) -> tuple[list[dict], dict[str, float]]:
    """Rows of the encoder table and, per dtype, the matmul rates (GFLOP/s) of F.linear and of
    minialign's Linear; the faster is the ceiling. backends: minialign's runs (BACKENDS; a dry run leaves
    out the compiled ones)."""
    torch.manual_seed(0)
    ours = Encoder(config).eval()
    hf_weights = convert.minialign_to_hf({f"encoder.{k}": v for k, v in ours.state_dict().items()}, config.arch)
    rows, ceilings = [], {}
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        runners = {
            "transformers eager": hf_encoder(config, "eager", dtype, hf_weights, device),
            "transformers sdpa": hf_encoder(config, "sdpa", dtype, hf_weights, device),
        }
        for backend in backends:
            model = Encoder(config, attn_backend=backend.split()[0])
            model.load_state_dict(ours.state_dict())
            runners[f"minialign {backend}"] = model.to(device=device, dtype=dtype).eval()
            if backend.endswith(" compiled"):
                model.compile()
        ort = onnxruntime_encoder(runners["transformers eager"], config, torch.get_num_threads()) \
            if dtype_name == "fp32" and device == "cpu" else None
        ceiling_calls, ceiling_flops = ceiling_matmul(dtype, device, ceiling_shape)
        timed = []
        for name, lengths in (batches or encoder_batches(device)).items():
            ids, mask = (t.to(device) for t in inputs(config, lengths))
            calls = {label: (lambda m=m: m(ids, attention_mask=mask)) for label, m in runners.items()}
            for label, backend in (("unpadded", "sdpa"), ("unpadded flex", "flex")):
                if (model := runners.get(f"minialign {backend}")) is not None:
                    calls[f"minialign {label}"] = lambda m=model: m(ids, attention_mask=mask, unpad=True)
            if device == "cpu" and dtype_name == "fp32":  # the other kernel choice (linear.py), same model
                calls["minialign unpadded, F.linear only"] = lambda m=runners["minialign sdpa"]: without_packing(
                    lambda: m(ids, attention_mask=mask, unpad=True))
            if ort is not None:
                calls["onnxruntime (transformers export)"] = lambda: ort(ids, mask)
            calls.update({f"matmul {label}": call for label, call in ceiling_calls.items()})
            with torch.inference_mode():
                results = interleaved(calls, rounds=reps if dtype_name == "fp32" or device != "cpu" else 1)
            timed.append((name, lengths, results))
        rates = {label: max(ceiling_flops / results.pop(f"matmul {label}") for _, _, results in timed) / 1e9
                 for label in ceiling_calls}
        ceiling = max(rates.values())
        ceilings[dtype_name] = rates
        echo(f"{model_name} {dtype_name} matmul ceiling {ceiling:.1f} GFLOP/s "
             f"({', '.join(f'{label} {rate:.1f}' for label, rate in rates.items())})")
        for name, lengths, results in timed:
            tokens, flops, base = sum(lengths), encoder_flops(config, lengths), results["transformers sdpa"]
            for label, seconds in results.items():
                row = {"model": model_name, "dtype": dtype_name, "batch": name, "impl": label,
                       "tokens/s": tokens / seconds, "vs hf sdpa": base / seconds, "GFLOP/s": flops / seconds / 1e9,
                       "of ceiling": flops / seconds / 1e9 / ceiling}
                rows.append(row)
                echo(f"{model_name} {dtype_name} {name:8} {label:26} {row['tokens/s']:9.0f} tok/s  "
                     f"x{row['vs hf sdpa']:.2f}  {row['GFLOP/s']:6.1f} GFLOP/s ({row['of ceiling']:.0%})")
    return rows, ceilings


def without_packing(call):
    """call() with minialign's Linear on torch's F.linear everywhere (Linear.prepack off)."""
    Linear.prepack = False
    try:
        return call()
    finally:
        Linear.prepack = True
