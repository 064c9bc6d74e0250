"""An unknown keyword to from_pretrained is refused at the entry point, naming it, its closest accepted keyword and
every accepted one, before any source is read (the source here does not exist: the keyword is checked first)."""

import pytest

import minialign as ma
from minialign.loading.pretrained import check_keywords


@pytest.mark.parametrize("cls", [ma.Encoder, ma.AlignModel])
def test_an_unknown_keyword_names_itself_and_the_accepted_ones(cls, tmp_path):
    with pytest.raises(TypeError) as info:
        cls.from_pretrained(tmp_path / "absent", backend="eager")
    message = str(info.value)
    assert f"{cls.__name__}.from_pretrained()" in message
    assert "'backend' (did you mean 'attn_backend'?)" in message
    assert "accepts backbone, device, dtype, attn_backend" in message


def test_known_keywords_pass_and_reach_the_loader(tmp_path):
    with pytest.raises(Exception) as info:  # the missing source, not the keyword, is what fails
        ma.Encoder.from_pretrained(tmp_path / "absent", attn_backend="eager", dtype="fp32")
    assert "unexpected keyword" not in str(info.value)


def test_check_keywords_lists_every_unknown_one():
    with pytest.raises(TypeError, match=r"'dtpye' \(did you mean 'dtype'\?\), 'zz'; it accepts dtype, device"):
        check_keywords("f", ["dtpye", "device", "zz"], ["dtype", "device"])
    check_keywords("f", ["dtype"], ["dtype", "device"])  # nothing unknown: no error
