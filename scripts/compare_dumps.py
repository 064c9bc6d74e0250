"""Compare two dumps of scripts/dump_outputs.py: every entry bit-identical (tensors by torch.equal, NaN equal
to NaN), else each differing or missing entry named; exit 1 then."""
import sys, torch
a, b = torch.load(sys.argv[1], weights_only=False), torch.load(sys.argv[2], weights_only=False)
bad = []
def same(x, y):
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype and torch.equal(x.nan_to_num(), y.nan_to_num())
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return isinstance(y, list) and len(x) == len(y) and all(same(i, j) for i, j in zip(x, y))
    return x == y
for k in sorted(set(a) | set(b)):
    if k not in a or k not in b:
        bad.append(f"{k}: only in {'before' if k in a else 'after'}")
    elif not same(a[k], b[k]):
        bad.append(f"{k}: differs")
print("\n".join(bad) or f"all {len(a)} entries bit-identical")
sys.exit(1 if bad else 0)
