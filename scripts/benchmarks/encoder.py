"""Encoder forward: minialign's backends and layouts against transformers (eager, sdpa) and ONNX
Runtime on one model's weights, with the matmul ceiling timed in the same rounds."""

from __future__ import annotations

import random
import tempfile
import warnings
from dataclasses import dataclass

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


# -- the GPU suite's rows (scripts/gpu_suite.sh: bench.py --suite encoder / drift; the method: timing.py) ----------

@dataclass(frozen=True)
class Impl:
    """One minialign run of the suite: the model's attention backend, packed (unpad=True) or padded, compiled
    (model.compile()) or eager."""

    backend: str
    packed: bool = False
    compiled: bool = False

    @property
    def compiles(self) -> bool:
        """Whether its warm-up compiles: the model compiled, or the flex backend (its kernel compiled per shape)."""
        return self.compiled or self.backend == "flex"


SECTION = "encoder"
BASELINE = "transformers sdpa"  # every ratio of the section is against transformers' sdpa, uncompiled
PEERS = ("transformers eager", BASELINE)
# minialign's runs (padded flex left out: on 64 x 512 it is packed flex's layout, and each flex shape compiles)
SUITE_IMPLS = {"minialign eager": Impl("eager"), "minialign sdpa": Impl("sdpa"),
               "minialign packed (sdpa)": Impl("sdpa", packed=True),
               "minialign packed varlen": Impl("varlen", packed=True),
               "minialign sdpa compiled": Impl("sdpa", compiled=True),
               "minialign packed flex": Impl("flex", packed=True)}
DRY_RUN_IMPLS = ("minialign eager", "minialign sdpa", "minialign packed (sdpa)", "minialign packed varlen",
                 "minialign sdpa compiled")  # a dry run's: flex compiles for minutes on a CPU
# The rows repeated at the end of the suite's call: the 64 x 512 eager / sdpa rows, to tell a slower machine (its
# clocks, its host) from a slower path when they move between calls.
DRIFT_IMPLS = ("transformers eager", BASELINE, "minialign eager", "minialign sdpa", "minialign packed (sdpa)")
DRIFT_CASE = "again at the end"


def suite_batches(device: str) -> dict[str, list[int]]:
    """The suite's cases: 64 sequences of 512 tokens, and 64 of the seeded length mix (24-512 tokens)."""
    return {"64 x 512": [512] * 64, "64 mixed": mixed_lengths(64)}


def case_name(model_name: str, dtype_name: str, batch: str) -> str:
    return f"{model_name} {dtype_name} {batch}"


def offered_impls(names) -> dict[str, Impl]:
    """SUITE_IMPLS of `names` this checkout has: a backend the attention table lacks (one still being added) left
    out."""
    from benchmarks import offered

    return {name: SUITE_IMPLS[name] for name in names
            if name in SUITE_IMPLS and offered.backend(SUITE_IMPLS[name].backend)}


def suite_rows(*, reps: int, dtype_name: str, config: Config = ROBERTA_BASE, model_name: str = "roberta-base",
               device: str = "cuda", batches: dict[str, list[int]] | None = None, impls=None, peers=PEERS,
               case_suffix: str = "", first: dict[tuple[str, str], float] | None = None,
               ceiling_shape: tuple[int, int, int] | None = None, add=lambda rows: None, echo=print) -> list[dict]:
    """The section's rows (data.py), each case's rows passed to `add` as soon as they are measured: per batch of
    `batches` (default suite_batches), transformers' `peers` and minialign's `impls` (names of SUITE_IMPLS; default
    all this checkout offers) timed by timing.repeat in `reps` interleaved repetitions (in timing.phases' groups:
    an impl that compiles apart) beside the matmul ceiling, then one call each counted (syncs, kernels, the backend it
    ran on). first: (batch, impl) -> median_ms measured
    earlier in the same call, for the rows' vs_first (the drift rows)."""
    from benchmarks import data
    from benchmarks.syncs import backend_of, counted, per_call
    from benchmarks.timing import phases, repeat

    from minialign.nn.layout import HostBatch

    dtype = DTYPES[dtype_name]
    impls = offered_impls(SUITE_IMPLS if impls is None else impls)
    torch.manual_seed(0)
    ours = Encoder(config).eval()
    hf_weights = convert.minialign_to_hf({f"encoder.{k}": v for k, v in ours.state_dict().items()}, config.arch)
    runners = {name: hf_encoder(config, name.split()[1], dtype, hf_weights, device) for name in peers}
    models = {}
    for impl in impls.values():
        if (impl.backend, impl.compiled) not in models:
            model = Encoder(config, attn_backend=impl.backend)
            model.load_state_dict(ours.state_dict())
            models[impl.backend, impl.compiled] = model.to(device=device, dtype=dtype).eval()
            if impl.compiled:
                model.compile()
    ceiling_calls, ceiling_flops = ceiling_matmul(dtype, device, ceiling_shape)
    m, k, n = ceiling_shape or CEILING_SHAPE[torch.device(device).type]
    rows = []
    for batch, lengths in (batches or suite_batches(device)).items():
        case = case_name(model_name, dtype_name, batch) + (f", {case_suffix}" if case_suffix else "")
        ids, mask = inputs(config, lengths)
        host = HostBatch.of(ids, lengths)  # what the batching engine hands the forward: no host sync for its layout
        ids, mask = ids.to(device), mask.to(device)
        raw = {name: (lambda r=r: r(input_ids=ids, attention_mask=mask)) for name, r in runners.items()}
        raw.update({name: (lambda m=models[impl.backend, impl.compiled], p=impl.packed:
                           m(ids, attention_mask=mask, unpad=p, host=host)) for name, impl in impls.items()})
        compiled = {name for name, impl in impls.items() if impl.compiles}
        recompiles, best = {}, None
        for index, group in enumerate(phases(list(raw), BASELINE, compiled)):
            echo(f"{SECTION} | {case}: timing {', '.join(group)} ({reps} reps after a warm-up)")
            calls = {name: counted(raw[name], recompiles, name) if name in compiled else raw[name] for name in group}
            if index == 0:  # the ceiling timed beside the first group
                calls.update({f"matmul {label}": call for label, call in ceiling_calls.items()})
            with torch.inference_mode():
                times = repeat(calls, reps=reps, device=device,
                               warm_up={label: raw.get(label, call) for label, call in calls.items()})
                matmuls = {label: times.pop(f"matmul {label}") for label in ceiling_calls if f"matmul {label}" in times}
                case_rows = [data.row(SECTION, case, f"matmul ceiling ({label})", baseline=None, ratio=None,
                                      **t.figures(), gflop_s=ceiling_flops / t.median / 1e9, shape=f"{m}x{k} @ {k}x{n}")
                             for label, t in matmuls.items()]
                best = best or max(row["gflop_s"] for row in case_rows)
                base = times.get(BASELINE)
                for name, t in times.items():
                    if name == BASELINE and index > 0:
                        continue  # the baseline's row is its first group's
                    impl = impls.get(name)
                    backend = None
                    if impl is not None and not impl.compiled:
                        _, backend = backend_of(raw[name], impl.backend)
                    flops = encoder_flops(config, lengths)
                    earlier, figures = (first or {}).get((batch, name)), t.figures()
                    case_rows.append(data.row(
                        SECTION, case, name, baseline=BASELINE if base else None,
                        ratio=base.median / t.median if base else None, **figures,
                        tokens_per_s=sum(lengths) / t.median, gflop_s=flops / t.median / 1e9,
                        of_ceiling=flops / t.median / 1e9 / best, inputs=len(lengths),
                        **per_call(raw[name], device, compiles=name in compiled, echo=echo), backend=backend,
                        compile_s=t.compile_s() if name in compiled else None,
                        recompiles=recompiles.get(name, 0) if name in compiled else None,
                        vs_first=earlier / figures["median_ms"] if earlier else None))
            for row in case_rows:
                echo(row_line(row))
            add(case_rows)
            rows += case_rows
    return rows


def row_line(row: dict) -> str:
    """One row as a progress line (stderr while a stage runs)."""
    figures = ", ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                        for key, value in row.items() if key not in ("section", "case", "impl", "baseline"))
    return f"{row['section']} | {row['case']} | {row['impl']}: {figures}"
