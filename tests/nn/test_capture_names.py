"""The docs' "Capture names" table (docs/internals/index.md) is the code's: scripts/capture_names.py generates it from one forward of each
family under capture, and the page holds exactly that output (so a new record, or a new family, shows here)."""

from pathlib import Path

import pytest
import torch

import minialign as ma

import capture_names

README = Path(__file__).resolve().parents[2] / "docs" / "internals" / "index.md"


def test_the_readme_lists_the_names_the_code_records():
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- capture-names -->\n", 1)[1].split("\n<!-- /capture-names -->", 1)[0]
    assert block == capture_names.table(), "docs/internals/index.md's capture names drifted: python scripts/capture_names.py"


def test_every_family_has_its_row_and_the_pre_ln_names():
    from minialign.nn.config import families

    assert set(capture_names.FAMILY_PRESETS) == set(families())
    modernbert = capture_names.names("modernbert")
    assert {"layers.{i}.attention_norm", "layers.{i}.ffn_norm", "final_norm"} <= set(modernbert)
    assert modernbert.index("layers.{i}.attention_norm") < modernbert.index("layers.{i}.attention.q")
    assert {"layers.{i}.attention.c2p", "layers.{i}.attention.p2c", "relative.table"} <= set(
        capture_names.names("deberta-v2"))


def test_deberta_v2s_convolution_output_is_listed_for_its_layer_alone():
    found = capture_names.names("deberta-v2")  # with conv_kernel_size > 0 (capture_names.OPTIONAL)
    assert {"layers.0.conv.conv", "layers.0.conv.output"} <= set(found)
    assert not any(n.startswith("layers.{i}.conv") or n.startswith("layers.1.") for n in found)
    assert found.index("layers.{i}.output") < found.index("layers.0.conv.output")


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_the_convolution_output_is_transformers_hidden_states_1(backend, tmp_path):
    """On a tiny DeBERTa-v2 with its convolution (conv_kernel_size 3), `layers.0.conv.output` is transformers'
    hidden_states[1] (DebertaV2Encoder applies `conv` after the first layer), padded rows zero on both sides;
    `layers.0.output` is the first layer's output before it, and `layers.1.input` the convolution's output."""
    import transformers

    config = transformers.DebertaV2Config(
        vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=64, relative_attention=True, pos_att_type=["p2c", "c2p"], conv_kernel_size=3,
        conv_act="gelu", max_relative_positions=24, type_vocab_size=2, pad_token_id=0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = transformers.DebertaV2Model(config).eval()
    with torch.no_grad():  # non-zero biases: a part left out cannot pass
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(tmp_path / "m")
    model = ma.Encoder.from_pretrained(tmp_path / "m", attn_backend=backend)
    ids = torch.randint(1, 97, (2, 9))
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4])
    ids = ids * mask
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        with ma.capture(model) as cap:
            model(ids, attention_mask=mask)
    torch.testing.assert_close(cap["layers.0.conv.output"], theirs[1], atol=1e-5, rtol=0)
    assert torch.equal(cap["layers.1.input"], cap["layers.0.conv.output"])
    assert (cap["layers.0.output"] - theirs[1])[mask.bool()].abs().max() > 1e-2  # before the convolution: another
    assert not cap["layers.0.conv.output"][1, 5:].any() and not theirs[1][1, 5:].any()
