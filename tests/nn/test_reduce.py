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


def test_row_product_is_the_matmul_and_does_not_follow_the_batch():
    """A one-row product (the first-token path's attention scores and output) equals torch's matmul within float32
    rounding, and each matrix's result is the same bits alone and anywhere in batches of 2-40 (a DeBERTa-v2
    sequence's first token got other bits beside 4 others through torch.matmul, tests/products/test_zero_shot.py)."""
    from minialign.nn.reduce import row_product

    torch.manual_seed(0)
    H, D, L = 3, 12, 56
    queries, keys = torch.randn(60, H, 1, D), torch.randn(60, H, L, D)
    table = torch.randn(H, 32, D)  # broadcast over the batch, as DeBERTa's position table
    alone = row_product(queries[7:8], keys[7:8].transpose(-1, -2))
    alone_table = row_product(queries[7:8], table.transpose(-1, -2))
    torch.testing.assert_close(alone, torch.matmul(queries[7:8], keys[7:8].transpose(-1, -2)), rtol=1e-5, atol=1e-5)
    for size in (2, 5, 25, 40):
        for place in (0, size // 2, size - 1):
            rows = list(range(20, 20 + size))
            rows[place] = 7
            batch = row_product(queries[rows], keys[rows].transpose(-1, -2))
            assert torch.equal(batch[place:place + 1], alone), (size, place)
            assert torch.equal(row_product(queries[rows], table.transpose(-1, -2))[place:place + 1], alone_table)
    half = row_product(queries[:2].bfloat16(), keys[:2].transpose(-1, -2).bfloat16())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), torch.matmul(queries[:2], keys[:2].transpose(-1, -2)), rtol=0.05, atol=0.3)
    wide = torch.randn(2, 3, 4, D)  # more than one row: torch.matmul itself
    assert torch.equal(row_product(wide, keys[:2].transpose(-1, -2)), torch.matmul(wide, keys[:2].transpose(-1, -2)))
