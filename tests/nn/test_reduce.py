"""nn/reduce.py token_sum: a row's sum over its tokens is the same bits whatever padding its batch adds (x.sum(dim=1)
is not), and half-precision rows are summed in float32 and rounded once."""

import torch

from minialign.nn.reduce import token_sum


def test_a_rows_sum_does_not_change_with_the_padding_after_it():
    torch.manual_seed(0)
    differs = 0
    for _ in range(50):
        n = int(torch.randint(2, 40, (1,)))
        row = torch.randn(1, n, 36)
        padded = torch.zeros(3, n + int(torch.randint(1, 40, (1,))), 36)
        padded[0, :n] = row[0]
        assert torch.equal(token_sum(row)[0], token_sum(padded)[0])
        differs += not torch.equal(row.sum(dim=1)[0], padded.sum(dim=1)[0])
    assert differs > 0  # what token_sum is for: the plain reduction's bits follow the padded length
    torch.testing.assert_close(token_sum(padded), padded.sum(dim=1), rtol=1e-5, atol=1e-5)


def test_half_precision_rows_are_summed_in_float32():
    """The float32 sum rounded once (what torch's sum does with bf16); a GPU's bf16 scan would round at every token
    (not seen on this CPU, whose bf16 cumsum accumulates in float32 too)."""
    torch.manual_seed(1)
    x = torch.randn(2, 300, 8).bfloat16()
    got = token_sum(x)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, x.float().cumsum(dim=1)[:, -1].bfloat16())
    torch.testing.assert_close(got.float(), x.float().sum(dim=1), rtol=2 ** -7, atol=1e-3)
