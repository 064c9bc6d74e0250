"""README.md's first set-up command on a fresh virtual environment: its install alone (no test extra, which would
pull in numpy and much else behind the package's back), then what a new user runs first. The main job itself
(`minialign score` on AlignScore-base) runs offline against a hub cache filled beforehand with a tiny AlignScore
checkpoint and backbone under the published names, so its download is the only step not run: the one-time
conversion and its save (products/alignscore.py published_checkpoint -> loading save_native) are. Beside it:
int8 (its calibration cache), `convert`, `embed --output x.safetensors`, and, with the serve extra added, the
openai route's base64 embeddings. pip installs from its cache and the package index (about 20 s here)."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import published_alignscore_cache

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def readme_main_job() -> list[str]:
    """README.md's first bash block, its `&&`-joined steps: the installs, then the main job."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)\n```", text, re.S).group(1)
    return [step.strip() for step in block.split("&&")]


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """A virtual environment with README.md's install steps run in the repository, nothing else."""
    venv = tmp_path_factory.mktemp("readme") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    steps = readme_main_job()
    installs = [step for step in steps if step.startswith("pip install")]
    assert installs == ["pip install torch==2.13.0", "pip install -e ."], steps
    env = clean_env(venv)
    for step in installs:
        done = subprocess.run(step, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{step}:\n{done.stderr[-3000:]}"
    return venv


def clean_env(venv: Path, **extra) -> dict:
    """The fresh environment's PATH first, no PYTHONPATH (the suite's own packages stay out), offline hub."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", **{k: str(v) for k, v in extra.items()})
    return env


def run(venv, args, *, env, cwd=ROOT, timeout=300):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def test_readme_install_runs_the_main_job(fresh_venv, tmp_path, tiny_alignscore):  # noqa: F811
    """The README's main job, its download replaced by a filled cache: AlignScore-base converted once and saved
    (published_checkpoint, its backbone named as the tiny one's repo: the roberta-base name means the preset's
    config, of another size), then the README's command itself, which finds the converted copy."""
    cache = published_alignscore_cache(tmp_path / "hub", tiny_alignscore)
    env = clean_env(fresh_venv, HF_HUB_CACHE=cache, MINIALIGN_CACHE=tmp_path / "minialign")
    convert_once = ("from minialign.products import alignscore as a; "
                    "a.PUBLISHED['AlignScore-base'] = ('AlignScore-base.ckpt', 'org/tiny-roberta'); "
                    "print(a.published_checkpoint('AlignScore-base'))")
    run(fresh_venv, [str(fresh_venv / "bin" / "python"), "-c", convert_once], env=env)
    assert (tmp_path / "minialign" / "AlignScore-base" / "model.safetensors").is_file()  # converted once, saved
    main_job = readme_main_job()[-1]
    assert main_job.startswith("minialign score ")
    done = run(fresh_venv, ["bash", "-c", main_job], env=env)
    assert 0.0 <= float(done.stdout) <= 1.0


def test_readme_install_writes_files(fresh_venv, tmp_path, minilm_dir):  # noqa: F811
    """What the guides show first, on the bare install: int8 (calibrated and cached), convert, embed to safetensors."""
    env = clean_env(fresh_venv, MINIALIGN_CACHE_DIR=tmp_path / "cache", HF_HUB_CACHE=tmp_path / "hub")
    python = str(fresh_venv / "bin" / "python")
    script = ("import minialign as ma; e = ma.SentenceEncoder.from_pretrained(%r, dtype='int8'); "
              "v = e.encode(['a sentence', 'another one'], normalize_embeddings=True); "
              "print(tuple(v.shape), round(float(v[0] @ v[1]), 3))" % str(minilm_dir))
    done = run(fresh_venv, [python, "-c", script], env=env)
    assert done.stdout.startswith("(2, 384)")
    assert list((tmp_path / "cache").rglob("*.safetensors")), "the int8 calibration cache was not written"

    run(fresh_venv, ["minialign", "convert", str(minilm_dir), str(tmp_path / "converted")], env=env)
    assert (tmp_path / "converted" / "model.safetensors").is_file()

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("one", "two", "three")))
    run(fresh_venv, ["minialign", "embed", "--model", str(minilm_dir), "--input", str(rows),
                     "--output", str(tmp_path / "vectors.safetensors")], env=env)
    from safetensors.torch import load_file

    tensors = load_file(tmp_path / "vectors.safetensors")
    assert any(t.shape == (3, 384) for t in tensors.values()), {k: t.shape for k, t in tensors.items()}


def test_serve_extra_base64_embeddings(fresh_venv, tmp_path, minilm_dir):  # noqa: F811
    """The serve extra on top of the bare install; the openai route's base64 embeddings (float32 bytes)."""
    env = clean_env(fresh_venv, MINIALIGN_CACHE_DIR=tmp_path / "cache")
    run(fresh_venv, ["bash", "-c", 'pip install -e ".[serve]"'], env=env, timeout=600)
    proc = subprocess.Popen(["minialign", "serve", "--embed", str(minilm_dir), "--host", "127.0.0.1", "--port", "0"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        deadline, url, seen = time.monotonic() + 120, None, []
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            seen.append(line)
            match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            url = match and match.group(1)
        assert url, "".join(seen)
        with urllib.request.urlopen(url + "/v1/models", timeout=60) as response:
            name = json.loads(response.read())["data"][0]["id"]
        body = json.dumps({"input": ["a sentence"], "model": name, "encoding_format": "base64"}).encode()
        request = urllib.request.Request(url + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    import base64
    import struct

    raw = base64.b64decode(answer["data"][0]["embedding"])
    vector = struct.unpack(f"<{len(raw) // 4}f", raw)
    import torch

    import minialign as ma

    direct = ma.SentenceEncoder.from_pretrained(minilm_dir).encode(["a sentence"])[0]
    assert torch.allclose(torch.tensor(vector), direct, atol=1e-5), "the route's base64 vector is not the encoder's"
