"""loading/weights.py: a checkpoint that does not fit its configuration is refused with a short error that
says why."""

import subprocess
import sys

import pytest
import torch

import minialign as ma


def test_shape_mismatch_error_is_short_and_says_why(tmp_path):
    from conftest import write_alignscore_ckpt

    path, _ = write_alignscore_ckpt(tmp_path / "a.ckpt", "roberta", vocab_size=50265, max_position_embeddings=514,
                                    hidden_size=24, num_attention_heads=2, intermediate_size=30, num_hidden_layers=2)
    with pytest.raises(ma.CheckpointError) as err:
        ma.AlignModel.from_pretrained(path)  # hyper_parameters name roberta-base: 768 wide
    message = str(err.value)
    assert len(message) < 1200 and "tensor shape(s) disagree" in message and "more" in message
    assert "--backbone" in message


def test_a_load_builds_on_meta_without_drawing_initial_values(minilm_dir):
    """Every initial value a module constructor draws is skipped on the meta device (nn/init.py shapes_only): a
    fresh process loads a model without torch running meta normal_ through its Python reference, which imports
    torch._dynamo (~1 s of a first load)."""
    script = ("import sys, minialign as ma\n"
              f"ma.SentenceEncoder.from_pretrained({str(minilm_dir)!r})\n"
              "print('torch._dynamo' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "False"


def test_shapes_only_skips_draws_on_meta_alone():
    """Inside shapes_only a module is built on meta with nothing drawn; a module asked for on the CPU there still gets
    its initial values, and torch's own draws run as before outside it."""
    from minialign.nn.init import shapes_only

    with shapes_only():
        meta = torch.nn.Embedding(5, 3, padding_idx=0)
        torch.manual_seed(0)
        cpu = torch.nn.Embedding(5, 3, padding_idx=0, device="cpu")
    torch.manual_seed(0)
    outside = torch.nn.Embedding(5, 3, padding_idx=0)
    assert meta.weight.is_meta
    assert torch.equal(cpu.weight, outside.weight) and cpu.weight.abs().sum() > 0 and not cpu.weight[0].any()
