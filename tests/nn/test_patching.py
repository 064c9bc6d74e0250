"""minialign.nn.patching against the definitions: batched activation patching equal to one forward per patch (the
serial definition) and to ma.patch by hand, path patching's four runs done by hand, attribution patching equal to the
exact effects where the metric is linear in the activation, integrated gradients' completeness axiom."""

import dataclasses

import pytest
import torch
from family_builders import random_encoder

import minialign as ma
from minialign.nn import analysis, patching
from minialign.nn.config import families


def _patching_model():
    config = ma.Config(vocab_size=300, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
                       hidden_dropout=0.0, attention_dropout=0.0)
    return ma.Encoder(config, seed=0).eval()


def _clean_and_corrupted():
    torch.manual_seed(3)
    ids = torch.randint(5, 300, (1, 8))
    corrupted = ids.clone()
    corrupted[0, 3] = 7  # one token differs
    return {"input_ids": ids}, {"input_ids": corrupted}


def test_activation_patching_against_its_definition():
    """The last layer's clean output restores the clean metric; a token's embedding patched where the two inputs
    agree changes nothing, where they differ it restores; one head is ma.patch of that head alone."""
    model = _patching_model()
    clean, corrupted = _clean_and_corrupted()

    def metric(out):
        return out.last_hidden_state[0, 0, :4].sum()

    whole = analysis.activation_patching(model, clean, corrupted, metric, ["layers.*.output"])
    assert list(whole.effects) == [f"layers.{i}.output" for i in range(3)] and whole.per is None
    assert abs(whole.clean - whole.corrupted) > 1e-3
    assert whole.effects["layers.2.output"].item() == pytest.approx(whole.clean, abs=1e-5)
    assert whole.restored()["layers.2.output"].item() == pytest.approx(1.0, abs=1e-4)

    per_position = analysis.activation_patching(model, clean, corrupted, metric, ["layers.0.input"], per="position")
    effect = per_position.effects["layers.0.input"]
    assert effect.shape == (8,)
    same = [i for i in range(8) if i != 3]
    torch.testing.assert_close(effect[same], torch.full((7,), per_position.corrupted), atol=1e-5, rtol=0)
    assert abs(effect[3] - per_position.corrupted) > 1e-4

    per_head = analysis.activation_patching(model, clean, corrupted, metric, ["layers.1.attention.context"], per="head")
    with torch.no_grad(), ma.capture(model, names=["layers.1.attention.context"]) as cap:
        model(**clean)
    source = cap["layers.1.attention.context"]

    def head_two(t):
        out = t.clone()
        out[:, 2] = source[:, 2]
        return out

    with torch.no_grad(), ma.patch(model, {"layers.1.attention.context": head_two}):
        expected = metric(model(**corrupted)).item()
    assert per_head.effects["layers.1.attention.context"].shape == (4,)
    assert per_head.effects["layers.1.attention.context"][2].item() == pytest.approx(expected, abs=1e-6)


def test_activation_patching_names_bad_input():
    model = _patching_model()
    clean, corrupted = _clean_and_corrupted()
    metric = lambda out: out.last_hidden_state[0, 0, 0]  # noqa: E731
    with pytest.raises(ValueError, match=r"input_ids is \(1, 8\) and \(1, 9\)"):
        analysis.activation_patching(model, clean, {"input_ids": torch.randint(5, 300, (1, 9))}, metric, ["layers.0.output"])
    with pytest.raises(ValueError, match="not a per-head"):
        analysis.activation_patching(model, clean, corrupted, metric, ["layers.0.output"], per="head")
    with pytest.raises(ValueError, match="metric must return one number"):
        analysis.activation_patching(model, clean, corrupted, lambda out: out.last_hidden_state, ["layers.0.output"])
    with pytest.raises(ValueError, match="NaN on the clean run"):
        analysis.activation_patching(model, clean, corrupted, lambda out: float("nan"), ["layers.0.output"])
    with pytest.raises(ValueError, match="close: layers.0.output"):
        analysis.activation_patching(model, clean, corrupted, metric, ["layers.0.outptu"])


# every family on eager and sdpa; flex (a compile per case) on a post-LN and the pre-LN family
FAMILY_BACKENDS = [(arch, backend) for arch in families() for backend in ("eager", "sdpa")] + [
    pytest.param("bert", "flex", marks=pytest.mark.slow), pytest.param("modernbert", "flex", marks=pytest.mark.slow)]


@pytest.mark.parametrize("arch,backend", FAMILY_BACKENDS)
def test_activation_patching_on_every_family_and_backend(arch, backend):
    """Padded inputs on any backend: the clean last state restores the clean metric exactly, a token's state
    patched where the inputs agree (before any layer mixed them) changes nothing."""
    model = random_encoder(arch, backend, num_layers=2)
    clean, corrupted = _clean_and_corrupted()
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]])  # the last token is padding
    clean, corrupted = {**clean, "attention_mask": mask}, {**corrupted, "attention_mask": mask}

    def metric(out):
        return out.last_hidden_state[0, 1, :4].sum()

    last = "final_norm" if "final_norm" in dict(model.named_modules()) else "layers.1.output"
    result = analysis.activation_patching(model, clean, corrupted, metric, [last, "layers.0.input"], per="position")
    assert result.effects[last][1].item() == pytest.approx(result.clean, abs=1e-5)
    unchanged = [i for i in range(7) if i != 3]
    torch.testing.assert_close(result.effects["layers.0.input"][unchanged], torch.full((6,), result.corrupted),
                               atol=1e-5, rtol=0)


# -- batched copies -----------------------------------------------------------------------------------------

def _padded_pair():
    """Two texts, the second padded (its last two tokens), token 3 corrupted in both."""
    torch.manual_seed(5)
    ids = torch.randint(5, 300, (2, 8))
    mask = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])
    corrupted = ids.clone()
    corrupted[:, 3] = 7
    return {"input_ids": ids, "attention_mask": mask}, {"input_ids": corrupted, "attention_mask": mask}


def _metric(out):  # nonlinear in the state, reads both texts
    return (out.last_hidden_state[:, 1, :4] ** 2).sum() + out.last_hidden_state[1, 5].sum()


@pytest.mark.parametrize("per", patching.PER)
@pytest.mark.parametrize("arch", ["bert", "modernbert", "deberta-v2"])
def test_batched_copies_equal_one_forward_per_patch(arch, per):
    """copies=5 (several names in one forward, a last forward of fewer copies) and the default equal copies=1, on a
    padded batch of two texts: each copy keeps its rows' attention_mask."""
    model = random_encoder(arch, "sdpa", num_layers=2)
    clean, corrupted = _padded_pair()
    if per in ("head", "head_position"):
        names = ["layers.0.attention.context", "layers.1.attention.head_outputs"][:2 if arch == "bert" else 1]
    else:
        names = ["layers.0.output", "layers.1.attention.context"]
    serial = patching.activation_patching(model, clean, corrupted, _metric, names, per=per, copies=1)
    for copies in (5, patching.COPIES) if arch == "bert" else (5,):
        batched = patching.activation_patching(model, clean, corrupted, _metric, names, per=per, copies=copies)
        assert list(batched.effects) == names and batched.clean == serial.clean
        for name in names:
            assert batched.effects[name].shape == serial.effects[name].shape
            torch.testing.assert_close(batched.effects[name], serial.effects[name], atol=1e-5, rtol=0)
    shapes = {None: (), "position": (8,), "head": (4,), "head_position": (4, 8)}
    assert serial.effects[names[0]].shape == shapes[per]
    assert per is None or serial.effects[names[0]].float().std() > 0  # the patches differ


def test_a_head_at_a_position_is_ma_patch_of_it_alone():
    model = random_encoder("bert", "sdpa", num_layers=2)
    clean, corrupted = _padded_pair()
    name = "layers.0.attention.head_outputs"
    grid = patching.activation_patching(model, clean, corrupted, _metric, [name], per="head_position")
    with torch.no_grad(), ma.capture(model, names=[name]) as cap:
        model(**clean)

    def one(t):
        out = t.clone()
        out[:, 2, 3] = cap[name][:, 2, 3]
        return out

    with torch.no_grad(), ma.patch(model, {name: one}):
        expected = _metric(model(**corrupted)).item()
    assert grid.effects[name].shape == (4, 8)
    assert grid.effects[name][2, 3].item() == pytest.approx(expected, abs=1e-5)


def test_rows_slices_every_batched_tensor():
    @dataclasses.dataclass
    class Out:
        a: torch.Tensor
        b: tuple
        c: torch.Tensor | None = None

    out = Out(torch.arange(6).view(6, 1), (torch.arange(6), torch.zeros(2)), None)
    got = patching._rows(out, 2, 4, 6)
    assert got.a.flatten().tolist() == [2, 3] and got.b[0].tolist() == [2, 3] and got.b[1].shape == (2,)
    assert got.c is None and patching._rows(torch.arange(6), 4, 6, 6).tolist() == [4, 5]


def test_bad_per_and_copies():
    model = random_encoder("bert", "sdpa", num_layers=1)
    clean, corrupted = _padded_pair()
    with pytest.raises(ValueError, match="per must be one of"):
        patching.activation_patching(model, clean, corrupted, _metric, ["layers.0.output"], per="token")
    with pytest.raises(ValueError, match="not a per-head"):
        patching.activation_patching(model, clean, corrupted, _metric, ["layers.0.output"], per="head_position")
    with pytest.raises(ValueError, match="copies must be at least 1"):
        patching.activation_patching(model, clean, corrupted, _metric, ["layers.0.output"], copies=0)


# -- path patching ------------------------------------------------------------------------------------------

def _path_by_hand(model, clean, corrupted, metric, sender, receivers, freeze_ffn=False):
    """The serial definition: Wang et al. 2022's four runs with ma.capture / ma.patch."""
    layer, head = sender
    layers = len(model.layers)
    send = f"layers.{layer}.attention.head_outputs"
    frozen = ([f"layers.{i}.attention.head_outputs" for i in range(layer + 1, layers)]
              + ([f"layers.{i}.ffn_output" for i in range(layer, layers)] if freeze_ffn else []))
    names = sorted({f"layers.{r}.attention.{role}" for r, _, role in receivers})
    with torch.no_grad():
        with ma.capture(model, names=[send]) as run1:
            model(**clean)
        with ma.capture(model, names=frozen) as run2:
            model(**corrupted)

        def sender_clean(t):
            out = t.clone()
            out[:, head] = run1[send][:, head]
            return out

        fns = {send: sender_clean, **{name: (lambda t, v=run2[name]: v.clone()) for name in frozen}}
        with ma.patch(model, fns), ma.capture(model, names=names) as run3:
            model(**corrupted)

        def receiver(name):
            def fn(t):
                out = t.clone()
                for r, h, role in receivers:
                    if f"layers.{r}.attention.{role}" == name:
                        out[:, h] = run3[name][:, h]
                return out
            return fn

        with ma.patch(model, {name: receiver(name) for name in names}):
            return metric(model(**corrupted)).item()


def test_path_patching_is_its_four_runs():
    model = _patching_model()
    clean, corrupted = _padded_pair()
    every = [(r, h, role) for r in (1, 2) for h in range(4) for role in "qkv"]
    some = [(1, 2, "k"), (2, 0, "q"), (2, 3, "v")]
    for receivers in (every, some):
        for freeze_ffn in (False, True):
            got = patching.path_patching(model, clean, corrupted, _metric, sender=(0, 1), receivers=receivers,
                                         freeze_ffn=freeze_ffn)
            assert got.per is None and list(got.effects) == ["layers.0.attention.head_outputs"]
            expected = _path_by_hand(model, clean, corrupted, _metric, (0, 1), receivers, freeze_ffn)
            assert got.effects["layers.0.attention.head_outputs"].item() == pytest.approx(expected, abs=1e-5)
    # every head of the layer a sender: the heads batched, each equal to its own call
    layer = patching.path_patching(model, clean, corrupted, _metric, sender=0, receivers=some)
    assert layer.per == "head" and layer.effects["layers.0.attention.head_outputs"].shape == (4,)
    for h in range(4):
        expected = _path_by_hand(model, clean, corrupted, _metric, (0, h), some)
        assert layer.effects["layers.0.attention.head_outputs"][h].item() == pytest.approx(expected, abs=1e-5)
    assert abs(got.clean - got.corrupted) > 1e-3


def test_batched_copies_keep_their_names_beside_a_shared_table():
    """MPNet: a name without a batch axis (its relative bias table, patched whole in a forward of its own) between
    batched ones: every effect stays under its own name, equal to copies=1."""
    model = random_encoder("mpnet", "eager", num_layers=2)
    clean, corrupted = _padded_pair()
    clean["input_ids"] %= model.config.vocab_size
    corrupted["input_ids"] %= model.config.vocab_size
    names = ["embeddings.sum", "relative_position_bias.by_offset", "layers.0.output", "layers.1.output"]
    serial = patching.activation_patching(model, clean, corrupted, _metric, names, copies=1)
    batched = patching.activation_patching(model, clean, corrupted, _metric, names, copies=32)
    assert list(batched.effects) == list(serial.effects) == names
    for name in names:
        torch.testing.assert_close(batched.effects[name], serial.effects[name], atol=1e-5, rtol=0)


def test_path_patching_numbers_heads_as_the_unpruned_layer():
    """After pruning head 1 of layer 0 (heads 0, 2, 3 left) and head 0 of layer 1: head 3 is the third on the H
    axis, as patching it by hand there gives; a pruned head is an error."""
    model = _patching_model()
    model.prune_heads({0: [1], 1: [0]})
    clean, corrupted = _padded_pair()
    receivers = [(1, 2, "q"), (2, 1, "v")]
    got = patching.path_patching(model, clean, corrupted, _metric, sender=(0, 3), receivers=receivers)
    expected = _path_by_hand(model, clean, corrupted, _metric, (0, 2), [(1, 1, "q"), (2, 1, "v")])
    assert got.effects["layers.0.attention.head_outputs"].item() == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="pruned"):
        patching.path_patching(model, clean, corrupted, _metric, sender=(0, 1), receivers=receivers)
    with pytest.raises(ValueError, match="pruned"):
        patching.path_patching(model, clean, corrupted, _metric, sender=(0, 3), receivers=[(1, 0, "k")])


def test_path_patching_names_bad_receivers():
    model = _patching_model()
    clean, corrupted = _padded_pair()
    with pytest.raises(ValueError, match="after the sender"):
        patching.path_patching(model, clean, corrupted, _metric, sender=(1, 0), receivers=[(1, 0, "q")])
    with pytest.raises(ValueError, match="q, k or v"):
        patching.path_patching(model, clean, corrupted, _metric, sender=(0, 0), receivers=[(1, 0, "o")])
    with pytest.raises(ValueError, match="head 9"):
        patching.path_patching(model, clean, corrupted, _metric, sender=(0, 9), receivers=[(1, 0, "q")])


# -- attribution patching -----------------------------------------------------------------------------------

def test_attribution_patching_is_exact_for_a_linear_metric():
    """A metric linear in the last layer's output (BERT's last hidden state): the first-order estimate is the
    exact effect, whole and per position; where clean and corrupted agree it is the corrupted metric exactly."""
    model = _patching_model()
    clean, corrupted = _padded_pair()

    def linear(out):
        return out.last_hidden_state[:, 1, :4].sum() - 2 * out.last_hidden_state[1, 5].sum()

    for per in (None, "position"):
        exact = patching.activation_patching(model, clean, corrupted, linear, ["layers.2.output"], per=per)
        estimate = patching.attribution_patching(model, clean, corrupted, linear, ["layers.2.output"], per=per)
        assert estimate.clean == pytest.approx(exact.clean) and estimate.corrupted == pytest.approx(exact.corrupted)
        torch.testing.assert_close(estimate.effects["layers.2.output"], exact.effects["layers.2.output"],
                                   atol=1e-5, rtol=0)
    inputs = patching.attribution_patching(model, clean, corrupted, _metric, ["layers.0.input"], per="position")
    same = [i for i in range(8) if i != 3]
    torch.testing.assert_close(inputs.effects["layers.0.input"][same], torch.full((7,), inputs.corrupted),
                               atol=1e-6, rtol=0)
    assert model.embeddings.word.weight.grad is None  # no parameter's gradient touched


def test_attribution_patching_tracks_the_exact_effects_per_head():
    """Per head and position of the last layer's context (read through Wo, the residual and a LayerNorm): the
    estimates in activation_patching's shapes, close to the exact effects for a one-token corruption."""
    model = _patching_model()
    clean, corrupted = _padded_pair()
    name = "layers.2.attention.context"
    exact = patching.activation_patching(model, clean, corrupted, _metric, [name], per="head_position")
    estimate = patching.attribution_patching(model, clean, corrupted, _metric, [name], per="head_position")
    assert estimate.effects[name].shape == exact.effects[name].shape == (4, 8)
    a = estimate.effects[name].flatten() - estimate.corrupted
    b = exact.effects[name].flatten() - exact.corrupted
    assert torch.corrcoef(torch.stack([a, b]))[0, 1] > 0.9


def test_attribution_patching_of_several_names_is_each_name_s_alone():
    """Names on one residual path in one call (each later one computed from the earlier): each name's estimates are
    those of a call naming it alone (the gradient of the whole metric reaches every one)."""
    model = _patching_model()
    clean, corrupted = _padded_pair()
    names = ["layers.0.output", "layers.1.output", "layers.2.output"]
    together = patching.attribution_patching(model, clean, corrupted, _metric, names, per="position")
    for name in names:
        alone = patching.attribution_patching(model, clean, corrupted, _metric, [name], per="position")
        torch.testing.assert_close(together.effects[name], alone.effects[name], atol=1e-6, rtol=0)
    assert (together.effects["layers.0.output"] - together.corrupted).abs().max() > 1e-4


# -- integrated gradients -----------------------------------------------------------------------------------

def test_integrated_gradients_is_exact_for_a_linear_metric_in_one_step():
    model = _patching_model()
    clean, _ = _padded_pair()

    def linear(out):
        return out.last_hidden_state[:, 1, :4].sum()

    ig = patching.integrated_gradients(model, clean, linear, "layers.2.output", steps=1)
    assert ig.attributions.shape == (2, 8) and abs(ig.completeness) < 1e-5
    with torch.no_grad(), ma.capture(model, names=["layers.2.output"]) as cap:
        model(**clean)
    expected = torch.zeros(2, 8)
    expected[:, 1] = cap["layers.2.output"][:, 1, :4].sum(-1)  # (a - 0) . gradient, the gradient 1 on those
    torch.testing.assert_close(ig.attributions, expected, atol=1e-5, rtol=0)


def test_integrated_gradients_completeness():
    """A nonlinear metric of a first-layer activation against a corrupted run's: the gap to the axiom shrinks with
    the steps, and the copies change nothing."""
    model = _patching_model()
    clean, corrupted = _padded_pair()
    name = "layers.0.attention.context"
    fine = patching.integrated_gradients(model, clean, _metric, name, baseline=corrupted, steps=64)
    assert fine.attributions.shape == (2, 4, 8)
    gap = fine.value - fine.baseline
    assert abs(gap) > 1e-3 and abs(fine.completeness) < 0.01 * abs(gap)
    serial = patching.integrated_gradients(model, clean, _metric, name, baseline=corrupted, steps=8, copies=1)
    batched = patching.integrated_gradients(model, clean, _metric, name, baseline=corrupted, steps=8, copies=3)
    torch.testing.assert_close(serial.attributions, batched.attributions, atol=1e-5, rtol=0)
    coarse = patching.integrated_gradients(model, clean, _metric, name, baseline=corrupted, steps=1)
    assert abs(coarse.completeness) > abs(fine.completeness)
    with pytest.raises(ValueError, match="one activation by its exact name"):
        patching.integrated_gradients(model, clean, _metric, "layers.*.output")


@pytest.mark.parametrize("arch", ["modernbert", "deberta-v2"])
def test_path_patching_on_a_pre_ln_and_a_relative_family(arch):
    model = random_encoder(arch, "sdpa", num_layers=3)
    clean, corrupted = _padded_pair()
    receivers = [(1, 2, "k"), (2, 0, "q"), (2, 3, "v")]
    got = patching.path_patching(model, clean, corrupted, _metric, sender=(0, 1), receivers=receivers)
    expected = _path_by_hand(model, clean, corrupted, _metric, (0, 1), receivers)
    assert got.effects["layers.0.attention.head_outputs"].item() == pytest.approx(expected, abs=1e-5)
