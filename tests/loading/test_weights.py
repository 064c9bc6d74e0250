"""loading/weights.py: a checkpoint that does not fit its configuration is refused with a short error that
says why."""

import pytest

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
