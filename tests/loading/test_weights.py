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


BUILD_EVERY_FAMILY = """
import sys
import minialign as ma
OWN_FIELDS = {own_fields!r}
from minialign.nn.config import families
from minialign.nn.init import shapes_only
from minialign.nn.score_functions import SCORE_FUNCTIONS
shapes = dict(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48)
configs = [ma.Config(arch=arch, **shapes, **OWN_FIELDS.get(arch, {{}})) for arch in families()]
configs += [ma.Config(arch="bert", score_fn=name, **shapes) for name in SCORE_FUNCTIONS]
configs += [ma.Config(arch="distilbert", sinusoidal_positions=True, **shapes)]
before = "torch._dynamo" in sys.modules
with shapes_only():
    for config in configs:
        ma.AlignModel(config)
print(len(configs), before, "torch._dynamo" in sys.modules)
"""


def test_a_load_builds_on_meta_without_drawing_initial_values(minilm_dir):
    """Every initial value a module constructor draws is skipped on the meta device (nn/init.py shapes_only): a
    fresh process loads a model, and builds every family's (every score function, DistilBERT's sinusoidal table
    too) for a checkpoint's values, without torch computing anything on meta through its Python references, which
    import torch._dynamo (~1 s of a first load)."""
    script = ("import sys, minialign as ma\n"
              "before = 'torch._dynamo' in sys.modules\n"
              f"ma.SentenceEncoder.from_pretrained({str(minilm_dir)!r})\n"
              "print(before, 'torch._dynamo' in sys.modules)\n")
    from family_builders import OWN_FIELDS  # passed as a literal: the child imports minialign alone

    for code in (script, BUILD_EVERY_FAMILY.format(own_fields=OWN_FIELDS)):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        before, after = run.stdout.split()[-2:]
        if before == "True":
            pytest.skip(f"torch {torch.__version__} imports torch._dynamo with itself: nothing for loading to avoid")
        assert after == "False", run.stdout


def test_shapes_only_skips_draws_on_meta_alone():
    """Inside shapes_only a module is built on meta and no draw reaches torch (a mode beneath it sees none); a
    module asked for on the CPU there still gets its initial values, the same as outside."""
    from torch.overrides import TorchFunctionMode

    from minialign.nn.init import shapes_only

    seen = []

    class Beneath(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with Beneath(), shapes_only():
        meta = torch.nn.Embedding(5, 3, padding_idx=0)
        torch.nn.Linear(3, 4)
    assert meta.weight.is_meta and seen and not {"normal_", "uniform_", "kaiming_uniform_"} & set(seen)
    with shapes_only():
        torch.manual_seed(0)
        cpu = torch.nn.Embedding(5, 3, padding_idx=0, device="cpu")
    torch.manual_seed(0)
    outside = torch.nn.Embedding(5, 3, padding_idx=0)
    assert torch.equal(cpu.weight, outside.weight) and cpu.weight.abs().sum() > 0 and not cpu.weight[0].any()
