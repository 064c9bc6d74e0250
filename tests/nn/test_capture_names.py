"""The docs' "Capture names" table (docs/internals/index.md) is the code's: scripts/capture_names.py generates it from one forward of each
family under capture, and the page holds exactly that output (so a new record, or a new family, shows here)."""

from pathlib import Path

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
