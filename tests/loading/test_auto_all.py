"""dtype="auto-all" through from_pretrained: fp32 weights, and all four projections of every layer (Q/K/V, the
attention output, the feed-forward's up and down) in mixed bf16 where this CPU runs bf16 natively (as "auto"
decides it: loading/devices.py auto_compute_dtype), fp32 throughout where it does not."""

import pytest
import torch

import minialign as ma
from minialign.loading import devices
from minialign.nn.linear import Linear, MixedPrecisionLinear
from minialign.nn.precision import PLAIN, mixed

PROJECTIONS = ("attention.qkv", "attention.output", "ffn.up", "ffn.down")


@pytest.mark.parametrize("native", [True, False])
def test_auto_all_mixes_the_four_projections_where_bf16_is_native(save_hf, monkeypatch, native):
    hf, directory = save_hf("bert")
    monkeypatch.setattr(devices, "cpu_has_native", lambda dtype, unknown=True: native)
    model = ma.Encoder.from_pretrained(directory, dtype="auto-all")
    auto = ma.Encoder.from_pretrained(directory, dtype="auto")
    fp32 = ma.Encoder.from_pretrained(directory)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.precision == (mixed(torch.bfloat16, layers="all") if native else PLAIN)
    mixed_layers = {name for name, m in model.named_modules() if isinstance(m, MixedPrecisionLinear)}
    assert mixed_layers == ({f"layers.{i}.{name}" for i in range(len(model.layers)) for name in PROJECTIONS}
                            if native else set())
    assert all(type(m) is Linear for name, m in model.named_modules() if isinstance(m, Linear)
               and name not in mixed_layers)
    ids = torch.randint(5, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        got, declared, ref = (m(ids).last_hidden_state for m in (model, auto, fp32))
        hf_bf16 = hf.to(torch.bfloat16)(ids).last_hidden_state.float()  # transformers' own bf16 error bounds ours
    assert got.dtype == torch.float32
    if native:
        assert not torch.equal(got, declared) and 0 < (got - ref).abs().max() <= 3 * (hf_bf16 - ref).abs().max()
    else:
        assert torch.equal(got, ref) and torch.equal(declared, ref)
