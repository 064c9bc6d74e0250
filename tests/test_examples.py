"""Every example runs and prints its result."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(name: str, *args: str, cwd: Path = EXAMPLES.parent) -> str:
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                            timeout=600, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_attention_maps(minilm_dir, tmp_path):
    """Every layer's line; the PNG written where matplotlib is installed, else said to be skipped, never both."""
    out = run("attention_maps.py", str(minilm_dir), cwd=tmp_path)
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("layer ")] == [f"layer {i}" for i in
                                                                                            range(6)]
    assert "layer 5: [CLS] looks at" in out
    png = tmp_path / "attention_maps.png"
    if importlib.util.find_spec("matplotlib") is not None:
        assert "wrote attention_maps.png" in out and png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert "matplotlib is not installed: skipping attention_maps.png" in out and not png.exists()


def test_left_only_vs_bidirectional(minilm_dir):
    out = run("left_only_vs_bidirectional.py", str(minilm_dir))
    assert "embeddings: cosine(bidirectional, left-only) = 1.000" in out
    last = float(out.strip().splitlines()[-1].rsplit("=", 1)[1])
    assert last < 0.99


def test_embedding_decomposition(minilm_dir):
    out = run("embedding_decomposition.py", str(minilm_dir))
    error = float(out.splitlines()[0].rsplit("=", 1)[1])
    assert error <= 1e-6


@pytest.mark.slow
def test_score_functions(tmp_path):
    out = run("score_functions.py", "120", cwd=tmp_path)  # its PNG (where matplotlib is installed) written there
    lines = [line for line in out.splitlines() if "held-out accuracy" in line]
    assert len(lines) == 5
    assert all(float(line.rsplit(" ", 1)[1]) > 0.8 for line in lines), out
    first = {line.split(":")[0].strip(): line.split("loss ")[1].split(" ->")[0] for line in lines}
    # one seeded head for all: general and bilinear start as the scaled dot product, so their first loss is its
    assert first["scaled_dot"] == first["general"] == first["bilinear"], first


def test_activation_patching(minilm_dir):
    """The city is carried by its own token through layer 4 (patching it alone restores the clean cosine, any
    other token nothing); the last layer, which mean pooling reads, has spread it over every token."""
    out = run("activation_patching.py", str(minilm_dir))
    lines = out.splitlines()
    tokens = lines[2].split()
    city = tokens.index("paris")
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in lines[3:] if line.strip().startswith(
        ("embeddings.", "layers."))}
    for name in ["embeddings.norm", *(f"layers.{i}.output" for i in range(5))]:
        assert rows[name][city] > 0.9, (name, out)
        assert all(abs(v) < 0.05 for i, v in enumerate(rows[name]) if i != city), (name, out)
    assert rows["layers.5.output"][city] < 0.9 and min(rows["layers.5.output"]) > 0.02, out
    assert lines[-1].startswith("layer 5, one head's context patched: head 0")
