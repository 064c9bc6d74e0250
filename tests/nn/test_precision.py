"""Kernels as modules: a precision (nn/precision.py) is a value, parsed once from what users type
(loading.parse_dtype), applied by swapping Linear variants (nn/linear.py swap) into exactly the layers one
declaration names (nn/layers.py PRECISION_LAYERS), or all of them (mixed(dtype, layers="all"), dtype="auto-all"),
every family's layer reading that declaration; a swap keeps the module, its parameters, its state dict and its
hooks."""

from __future__ import annotations

import copy
import pickle
import sys
from pathlib import Path

import pytest
import torch

import minialign as ma
from minialign.loading import Checkpoint, DtypeChoice, build, devices, parse_dtype
from minialign.models.modernbert import ModernBertLayer
from minialign.nn import int8
from minialign.nn.int8 import Int8Linear
from minialign.nn.layers import PRECISION_LAYERS, EncoderLayer
from minialign.nn.linear import Linear, MixedPrecisionLinear, swap
from minialign.nn.choices import PRECISION_DTYPES
from minialign.nn.precision import INT8, LAYER_SETS, PLAIN, Precision, apply_precision, mixed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from family_builders import FAMILIES, SHARED, supported  # noqa: E402

ARCHS = [arch for arch in ("bert", "modernbert", "deberta-v2") if supported(arch)]
# The four projections of an encoder layer, every Linear it declares for some precision (mixed(..., layers="all"))
PROJECTIONS = ("attention.qkv", "attention.output", "ffn.up", "ffn.down")


def _config(arch: str) -> ma.Config:
    row = FAMILIES[arch]
    return ma.Config.from_hf({"model_type": arch, "vocab_size": 99, **SHARED,
                              "max_position_embeddings": 64 + row.reserved, **row.fields})


def _by_class(model: torch.nn.Module) -> dict[str, str]:
    return {name: type(m).__name__ for name, m in model.named_modules() if isinstance(m, Linear)}


def _declared(model: torch.nn.Module, variant: type[Linear]) -> set[str]:
    return {f"layers.{i}.{name}" for i in range(len(model.layers)) for name in PRECISION_LAYERS[variant]}


def test_one_declaration_read_by_every_family_layer():
    assert ModernBertLayer.precision_layers is EncoderLayer.precision_layers is PRECISION_LAYERS
    assert set(PRECISION_LAYERS) == {MixedPrecisionLinear, Int8Linear}
    assert PRECISION_LAYERS[MixedPrecisionLinear] == ("attention.output", "ffn.down")


@pytest.mark.skipif(not int8.available(), reason="no FBGEMM int8 kernels on this torch / CPU")
@pytest.mark.parametrize("arch", ARCHS)
def test_loading_int8_swaps_exactly_the_declared_layers(arch):
    config = _config(arch)
    source = ma.Encoder(config, seed=0)
    ckpt = Checkpoint(config, {f"encoder.{k}": v for k, v in source.state_dict().items()}, "test")
    plain = build(ma.Encoder, ckpt)
    quantized = build(ma.Encoder, ckpt, dtype="int8")
    assert quantized.precision == INT8 and quantized.int8 and quantized.compute_dtype is None
    classes = _by_class(quantized)
    assert {name for name, kind in classes.items() if kind == "Int8Linear"} == _declared(quantized, Int8Linear)
    assert set(_by_class(plain).values()) == {"Linear"}
    assert quantized.state_dict().keys() == plain.state_dict().keys()
    for key, value in plain.state_dict().items():
        assert torch.equal(quantized.state_dict()[key], value), key


@pytest.mark.parametrize("arch", ARCHS)
def test_mixed_precision_and_back(arch):
    model = ma.Encoder(_config(arch), seed=0).eval()
    linears = {name: m for name, m in model.named_modules() if isinstance(m, Linear)}
    parameters = {name: p for name, p in model.named_parameters()}
    model.compute_dtype = torch.bfloat16
    assert model.precision == mixed(torch.bfloat16) and str(model.precision) == "mixed bfloat16"
    mixed_layers = {name for name, kind in _by_class(model).items() if kind == "MixedPrecisionLinear"}
    assert mixed_layers == _declared(model, MixedPrecisionLinear)
    assert all(model.get_submodule(n).compute_dtype == torch.bfloat16 for n in mixed_layers)
    # the declared layers new modules in their places, the others the same; the same parameters, under the same names
    assert all((model.get_submodule(name) is m) == (name not in mixed_layers) for name, m in linears.items())
    assert all(p is parameters[name] for name, p in model.named_parameters())
    model.compute_dtype = None
    assert model.precision == PLAIN and set(_by_class(model).values()) == {"Linear"}
    assert not any(hasattr(model.get_submodule(name), "_compute_dtype") for name in linears)
    assert all(p is parameters[name] for name, p in model.named_parameters())


def test_the_all_projections_recipe_is_every_declared_layer():
    """layers="all" takes the union of the declaration: the four projections, whatever each variant names."""
    assert set(mixed(torch.bfloat16, layers="all").takes(PRECISION_LAYERS)) == set(PROJECTIONS)
    assert mixed(torch.bfloat16).takes(PRECISION_LAYERS) == PRECISION_LAYERS[MixedPrecisionLinear]
    assert set(mixed(torch.bfloat16).takes(PRECISION_LAYERS)) < set(PROJECTIONS)  # else "all" would mean nothing
    assert INT8.takes(PRECISION_LAYERS) == PRECISION_LAYERS[Int8Linear] and PLAIN.takes(PRECISION_LAYERS) == ()


@pytest.mark.parametrize("arch", [name for name in FAMILIES if supported(name)])
def test_mixed_on_all_projections_of_every_family(arch):
    """mixed(bf16, layers="all") swaps exactly the four projections of every layer, leaving the embeddings', the
    pooler's and the head's Linear layers as they are; its outputs are fp32, within the error of the model cast to
    bf16 and not those of the declared-layers recipe; PLAIN gives the fp32 outputs back, bit for bit."""
    model = ma.ClassifierModel(_config(arch), seed=0).eval()
    encoder = model.encoder
    before = {name: m for name, m in model.named_modules() if isinstance(m, Linear)}
    ids = torch.randint(5, 99, (3, 11), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    real = mask.bool()
    run = lambda m: m(ids, attention_mask=mask).last_hidden_state  # noqa: E731
    with torch.inference_mode():
        ref = run(encoder)
        half = run(copy.deepcopy(encoder).to(torch.bfloat16)).float()
        model.precision = mixed(torch.bfloat16)
        declared = run(encoder)
        model.precision = everything = mixed(torch.bfloat16, layers="all")
        got = run(encoder)
    layers = {f"encoder.layers.{i}.{name}" for i in range(len(encoder.layers)) for name in PROJECTIONS}
    assert {name for name, kind in _by_class(model).items() if kind == "MixedPrecisionLinear"} == layers
    assert all(model.get_submodule(name).compute_dtype == torch.bfloat16 for name in layers)
    assert all(model.get_submodule(name) is m and type(m) is Linear for name, m in before.items() if name not in layers)
    assert model.precision == encoder.precision == everything and model.compute_dtype == torch.bfloat16
    assert str(everything) == "mixed bfloat16 (all projections)" != str(mixed(torch.bfloat16))
    assert got.dtype == torch.float32
    assert 0 < (got - ref)[real].abs().max() <= (half - ref)[real].abs().max()
    assert not torch.equal(got[real], declared[real])
    with pytest.raises(ValueError, match=r"runs the mixed bfloat16 \(all projections\) precision"):
        model.int8 = True
    model.compute_dtype = None
    assert model.precision == PLAIN and set(_by_class(model).values()) == {"Linear"}
    with torch.inference_mode():
        assert torch.equal(run(encoder), ref)


def test_a_model_runs_one_precision_at_a_time():
    model = ma.Encoder(_config("bert"), seed=0)
    model.compute_dtype = torch.bfloat16
    with pytest.raises(ValueError, match="runs the mixed bfloat16 precision"):
        model.int8 = True
    model.int8 = False  # off already: nothing changes
    assert model.compute_dtype == torch.bfloat16
    model.precision = INT8
    with pytest.raises(ValueError, match="runs the int8 precision"):
        model.compute_dtype = torch.bfloat16
    model.compute_dtype = None  # no mixed precision to turn off
    assert model.int8
    model.int8 = False
    assert model.precision == PLAIN


def test_swap_sets_a_new_module_over_the_same_parameters_with_its_hooks():
    layer = Linear(8, 4, activation="gelu")
    owner = torch.nn.ModuleDict({"inner": torch.nn.ModuleDict({"layer": layer})})
    calls = []
    handle = layer.register_forward_hook(lambda *args: calls.append(1))
    weight, bias, state = layer.weight, layer.bias, owner.state_dict()
    optimizer = torch.optim.SGD(owner.parameters(), lr=0.1)
    int8 = swap(owner, "inner.layer", Int8Linear)
    assert int8 is not layer and owner.inner.layer is int8 and type(int8) is Int8Linear and int8.int8
    assert int8.weight is weight and int8.bias is bias and int8.activation == "gelu"
    assert owner.state_dict().keys() == state.keys() and all(torch.equal(owner.state_dict()[k], state[k]) for k in state)
    assert all(p is q for p, q in zip(optimizer.param_groups[0]["params"], owner.parameters(), strict=True))
    absmax = torch.ones(8)
    smoothed = swap(owner, "inner.layer", Int8Linear, int8_input_absmax=absmax)  # already one: the setting given
    assert smoothed.int8_input_absmax is absmax and swap(owner, "inner.layer", Int8Linear) is smoothed  # kept
    mixed = swap(owner["inner"], "layer", MixedPrecisionLinear, compute_dtype=torch.bfloat16)
    assert not hasattr(mixed, "int8_input_absmax") and not hasattr(mixed, "_int8")  # int8's own state left
    assert mixed.compute_dtype == torch.bfloat16 and mixed.weight is weight
    with torch.inference_mode():
        mixed(torch.randn(2, 8))
    assert calls == [1]
    handle.remove()  # the hook's handle reaches the module in the layer's place
    with torch.inference_mode():
        mixed(torch.randn(2, 8))
    assert calls == [1]
    with pytest.raises(ValueError, match="floating torch.dtype"):
        swap(owner, "inner.layer", MixedPrecisionLinear, compute_dtype=torch.int8)
    with pytest.raises(ValueError, match="no setting int8_input_absmax"):
        swap(owner, "inner.layer", Linear, int8_input_absmax=absmax)
    with pytest.raises(TypeError):
        swap(torch.nn.ModuleDict({"plain": torch.nn.Linear(2, 2)}), "plain", Int8Linear)
    with pytest.raises(AttributeError):
        swap(owner, "inner.missing", Int8Linear)
    with pytest.raises(AttributeError):  # a variant is swapped in, never set as a flag
        mixed.int8 = True


@pytest.mark.skipif(not int8.available(), reason="no FBGEMM int8 kernels on this torch / CPU")
def test_pickles_and_copies_keep_the_variant_and_leave_the_packed_weights_out():
    model = ma.Encoder(_config("bert"), seed=0).eval()
    model.int8 = True
    ids = torch.randint(5, 99, (2, 7))
    with torch.inference_mode():
        expected = model(ids).last_hidden_state
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        layers = [m for m in clone.modules() if isinstance(m, Linear)]
        assert all(m._packed is None for m in layers)
        assert all(m._int8 is None for m in layers if isinstance(m, Int8Linear))
        assert _by_class(clone) == _by_class(model) and clone.int8
        with torch.inference_mode():
            assert torch.equal(clone(ids).last_hidden_state, expected)


def test_precision_values_are_checked():
    with pytest.raises(ValueError, match="unknown precision kind 'int4'"):
        Precision("int4")
    with pytest.raises(ValueError, match="floating torch.dtype"):
        mixed(torch.int8)
    with pytest.raises(ValueError, match="takes no compute_dtype"):
        Precision("int8", torch.bfloat16)
    with pytest.raises(TypeError, match="takes a Precision"):
        apply_precision(torch.nn.Linear(2, 2), "int8")
    with pytest.raises(ValueError, match="unknown precision layers 'writes'"):
        mixed(torch.bfloat16, layers="writes")
    for kind in ("plain", "int8"):
        with pytest.raises(ValueError, match=f"a mixed precision's choice; the {kind} precision"):
            Precision(kind, layers="all")
    assert mixed(torch.bfloat16, layers="all") != mixed(torch.bfloat16) == Precision("mixed", torch.bfloat16)
    assert set(LAYER_SETS) == {"declared", "all"}


def test_a_dtype_is_parsed_once_into_weights_and_precision():
    assert parse_dtype(None) == DtypeChoice(torch.float32, PLAIN)
    assert parse_dtype("bf16") == parse_dtype("BFloat16") == parse_dtype(torch.bfloat16) == DtypeChoice(torch.bfloat16)
    assert parse_dtype("int8") == DtypeChoice(torch.float32, INT8)
    assert parse_dtype("auto") == DtypeChoice(auto=True) and parse_dtype("auto").weights == torch.float32
    assert parse_dtype("auto-all") == parse_dtype("Auto-All") == DtypeChoice(auto=True, layers="all")
    assert parse_dtype("auto-all") != parse_dtype("auto")
    choice = parse_dtype("int8")
    assert parse_dtype(choice) is choice
    words = ("auto", "auto-all", "int8", "bf16", "fp16", "float32")
    assert [str(parse_dtype(d)) for d in words] == ["auto", "auto-all", "int8", "bfloat16", "float16", "float32"]
    for word in (None, *words):  # what a file records reads back to the same choice
        assert parse_dtype(str(parse_dtype(word))) == parse_dtype(word), word
    assert parse_dtype("auto-all").precision_on(torch.device("cpu")) in (PLAIN, mixed(torch.bfloat16, layers="all"))
    for bad in ("int4", "", 3, torch.int8, "all", "auto_all"):
        with pytest.raises(ValueError, match=r"dtype.*'auto', 'auto-all', 'int8' or a floating torch.dtype") as raised:
            parse_dtype(bad)
        assert repr(bad) in str(raised.value) or str(bad) in str(raised.value)


@pytest.mark.parametrize("native", [True, False])
def test_auto_decides_its_layers_precision_on_the_device(monkeypatch, native):
    """"auto" and "auto-all" are mixed bf16 where the device runs bf16 natively (on the declared layers / on all
    four projections), PLAIN where it does not."""
    monkeypatch.setattr(devices, "cpu_has_native", lambda dtype, unknown=True: native)
    cpu = torch.device("cpu")
    assert parse_dtype("auto").precision_on(cpu) == (mixed(torch.bfloat16) if native else PLAIN)
    assert parse_dtype("auto-all").precision_on(cpu) == (mixed(torch.bfloat16, layers="all") if native else PLAIN)


def test_the_dtype_words_are_declared_once():
    assert devices.MODES == PRECISION_DTYPES == ("auto", "auto-all", "int8")
    assert {*devices.AUTO_LAYERS, "int8"} == set(PRECISION_DTYPES)
    assert set(devices.AUTO_LAYERS.values()) == set(LAYER_SETS)
    with pytest.raises(ValueError, match="goes with auto=True"):
        DtypeChoice(layers="all")
    with pytest.raises(ValueError, match="unknown precision layers"):
        DtypeChoice(auto=True, layers="every")
    with pytest.raises(ValueError, match="keeps fp32 weights"):
        DtypeChoice(weights=torch.bfloat16, auto=True)
    with pytest.raises(ValueError, match="keeps fp32 weights"):
        DtypeChoice(precision=INT8, auto=True)
