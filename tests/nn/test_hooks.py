"""Hooks with context, module paths, stopping a forward, steering and SAE reconstruction (nn/capture.py,
nn/hooks.py, nn/interventions.py): a patch function taking a second parameter is told its Site; a module path reads
and writes a module's input or output and equals the recorded name it mirrors on every family; stop_after runs no
later layer and records what a full forward records up to it; steer and reconstruct act on real tokens only."""

from __future__ import annotations

import pytest
import torch

import minialign as ma
from family_builders import FAMILIES, random_encoder, supported

ARCHS = [name for name in FAMILIES if supported(name)]


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 250, (2, 7), generator=g)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    return ids, mask


def test_a_patch_function_with_a_second_parameter_is_told_its_site():
    model = random_encoder("bert")
    model.prune_heads({1: [2]})
    ids, mask = _batch()
    sites = []

    def look(t, site):
        sites.append(site)
        return t

    def one(t, scale=2.0):  # a second parameter with a default: called with the activation alone
        assert scale == 2.0
        return t

    with torch.no_grad(), ma.patch(model, {"layers.1.attention.context": look, "layers.0.output": look,
                                           "layers.1.output": one}):
        model(ids, mask)
    output, context = sites  # in the order the forward reaches them
    assert (context.name, context.layer, context.heads, context.layout) == ("layers.1.attention.context", 1,
                                                                            (0, 1, 3), "head")
    assert (output.name, output.layer, output.heads, output.layout) == ("layers.0.output", 0, None, "token")
    assert context.attention_mask is mask and torch.equal(context.real, mask.bool())


@pytest.mark.parametrize("arch", ARCHS)
def test_a_module_path_reads_and_writes_what_its_recorded_name_does(arch):
    """The output projection's output is the attention's output: read and patched by either name, the same."""
    model = random_encoder(arch)
    ids, mask = _batch()
    path, name = "layers.1.attention.output:output", "layers.1.attention.output"
    with torch.no_grad(), ma.capture(model, names=[path, name, "layers.1.ffn.up:input"]) as cap:
        model(ids, mask)
    assert torch.equal(cap[path], cap[name])
    assert cap["layers.1.ffn.up:input"].shape[:2] == (2, 7)
    push = ma.steer(torch.linspace(-1, 1, model.config.hidden_size), scale=3.0)
    with torch.no_grad():
        with ma.patch(model, {path: push}):
            by_path = model(ids, mask).last_hidden_state
        with ma.patch(model, {name: push}):
            by_name = model(ids, mask).last_hidden_state
        plain = model(ids, mask).last_hidden_state
    assert torch.equal(by_path, by_name) and not torch.allclose(by_path, plain, atol=1e-3)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # none left after the block


def test_a_layers_tuple_output_and_a_wrong_path():
    model = random_encoder("bert")
    ids, mask = _batch()
    with torch.no_grad(), ma.capture(model, names=["layers.*:output", "layers.1.output"]) as cap:
        model(ids, mask)
    assert [n for n in cap if n.endswith(":output")] == ["layers.0:output", "layers.1:output", "layers.2:output"]
    assert torch.equal(cap["layers.1:output"], cap["layers.1.output"])  # a layer's (x, probs): x
    with pytest.raises(ValueError, match="close: layers.1.ffn.up"):
        with ma.capture(model, names=["layers.1.ffn.upp:output"]):
            model(ids, mask)
    with pytest.raises(ValueError, match=":input' or ':output'"):
        with ma.patch(model, {"layers.1.ffn.up:weight": lambda t: t}):
            model(ids, mask)


@pytest.mark.parametrize("head", [False, True])
def test_stop_after_runs_no_later_layer(head):
    config = ma.Config(vocab_size=300, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=48,
                       hidden_dropout=0.0, attention_dropout=0.0)
    model = (ma.ClassifierModel(config, seed=0) if head else ma.Encoder(config, seed=0)).eval()
    encoder = model.encoder if head else model
    ids, mask = _batch()
    with torch.no_grad(), ma.capture(model) as full:
        model(ids, mask)
    calls = []
    handles = [layer.register_forward_hook(lambda m, a, o, i=i: calls.append(i))
               for i, layer in enumerate(encoder.layers)]
    ran_on = False
    for stop in (1, "encoder.layers.1" if head else "layers.1"):
        calls.clear()
        prefix = "encoder." if head else ""
        with torch.no_grad(), ma.capture(model, stop_after=stop,
                                         names=[f"{prefix}layers.*.output", f"{prefix}pooler.output"]) as cap:
            model(ids, mask)
            ran_on = True  # never reached: the block ends at the stop
        assert calls == [0, 1] and not ran_on and cap.stopped
        assert list(cap) == [f"{prefix}layers.0.output", f"{prefix}layers.1.output"]
        for name in cap:
            assert torch.equal(cap[name], full[name])
    for handle in handles:
        handle.remove()
    with pytest.raises(ValueError, match="no such layer"):
        with ma.capture(model, stop_after=9):
            model(ids, mask)


def test_steer_adds_at_the_real_tokens_or_the_positions_named():
    model = random_encoder("bert")
    ids, mask = _batch()
    vector = torch.randn(32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), ma.capture(model, names=["layers.0.output"]) as clean:
        model(ids, mask)
    with torch.no_grad(), ma.capture(model, names=["layers.0.output"]) as cap, \
            ma.patch(model, {"layers.0.output": ma.steer(vector, scale=2.0)}):
        model(ids, mask)
    added = cap["layers.0.output"] - clean["layers.0.output"]
    real = mask.bool()
    torch.testing.assert_close(added[real], (2.0 * vector).expand(int(real.sum()), -1))
    assert added[~real].abs().max() == 0  # the padding untouched
    with torch.no_grad(), ma.capture(model, names=["layers.0.output"]) as cap, \
            ma.patch(model, {"layers.0.output": ma.steer(vector, positions=[0, -1])}):
        model(ids, mask)
    moved = (cap["layers.0.output"] - clean["layers.0.output"]).abs().amax(-1) > 0
    assert moved.tolist() == [[True] + [False] * 5 + [True]] * 2
    with pytest.raises(ValueError, match="per head"):
        with torch.no_grad(), ma.patch(model, {"layers.0.attention.context": ma.steer(torch.ones(8))}):
            model(ids, mask)


def test_reconstruct_splices_an_sae_in_and_keep_error_leaves_the_forward_unchanged():
    model = random_encoder("bert")
    ids, mask = _batch()
    torch.manual_seed(0)
    sae = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    name = "layers.1.output"
    with torch.no_grad():
        plain = model(ids, mask).last_hidden_state
        with ma.capture(model, names=[name]) as clean:
            model(ids, mask)
        with ma.capture(model, names=[name]) as cap, ma.patch(model, {name: ma.reconstruct(sae)}):
            model(ids, mask)
    real = mask.bool()
    torch.testing.assert_close(cap[name][real], sae(clean[name])[real])
    assert torch.equal(cap[name][~real], clean[name][~real])  # no padding enters the SAE's features
    with ma.patch(model, {name: ma.reconstruct(sae, keep_error=True)}):
        kept = model(ids, mask).last_hidden_state
    assert torch.equal(kept, plain)  # the error term added back: the values bit for bit
    kept[real].pow(2).sum().backward()  # (a plain sum of a LayerNorm output has no gradient)
    assert sae[0].weight.grad.abs().sum() > 0  # and the SAE in the graph


class _SAE(torch.nn.Module):
    """A tiny SAE with encode / decode (what reconstruct(edit=) needs)."""

    def __init__(self, width: int, features: int):
        super().__init__()
        torch.manual_seed(0)
        self.enc, self.dec = torch.nn.Linear(width, features), torch.nn.Linear(features, width)

    def encode(self, x):
        return torch.relu(self.enc(x))

    def decode(self, f):
        return self.dec(f)

    def forward(self, x):
        return self.decode(self.encode(x))


def test_keep_error_passes_the_sae_s_gradient_alone_and_an_edit_is_not_cancelled():
    """SAELens' use_error_term: sae_out + no_grad(x - clean reconstruction). An identity SAE: the gradient reaching
    the input is the plain model's (not twice it); an SAE giving zeros: none; an edit of the features changes the
    forward by what it changed of the reconstruction."""
    model = random_encoder("bert")
    ids, mask = _batch()
    name = "layers.1.input"

    def input_grad(patches):
        captured = {}

        def keep(t):
            captured["x"] = t
            return t
        with ma.patch(model, {"layers.0.output": keep, **patches}):
            out = model(ids, mask).last_hidden_state
        return torch.autograd.grad(out[mask.bool()].pow(2).sum(), captured["x"])[0]

    plain = input_grad({})
    identity = input_grad({name: ma.reconstruct(torch.nn.Identity(), keep_error=True)})
    torch.testing.assert_close(identity, plain)
    zero = input_grad({name: ma.reconstruct(lambda x: x * 0, keep_error=True)})
    assert zero.abs().max() == 0
    sae = _SAE(32, 64)
    with torch.no_grad():
        base = model(ids, mask).last_hidden_state
        with ma.patch(model, {name: ma.reconstruct(sae, keep_error=True, edit=lambda f: f)}):
            unedited = model(ids, mask).last_hidden_state
        with ma.patch(model, {name: ma.reconstruct(sae, keep_error=True, edit=torch.zeros_like)}):
            ablated = model(ids, mask).last_hidden_state
    assert torch.equal(unedited, base)
    assert (ablated - base)[mask.bool()].abs().max() > 1e-3  # every feature ablated: the forward moves
    with pytest.raises(ValueError, match="encode and decode"):
        ma.reconstruct(torch.nn.Identity(), edit=lambda f: f)


def test_every_forward_keeps_its_real_tokens():
    model = random_encoder("bert")
    ids, mask = _batch()
    with torch.no_grad(), ma.capture(model, names=["layers.0.output"]) as cap:
        model(ids, mask)
        model(ids)
    assert len(cap.reals) == 2 and torch.equal(cap.reals[0], mask.bool()) and cap.reals[1] is None
    assert list(cap) == ["layers.0.output", "layers.0.output#1"]


def test_module_paths_inside_a_head_model_carry_its_prefix():
    config = ma.Config(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=48,
                       hidden_dropout=0.0, attention_dropout=0.0)
    model = ma.ClassifierModel(config, seed=0).eval()
    ids, mask = _batch()
    names = ["encoder.layers.1.attention.output:output", "encoder.layers.1.attention.output"]
    with torch.no_grad(), ma.capture(model, names=names) as cap:
        model(ids, mask)
    assert torch.equal(cap[names[0]], cap[names[1]])
    with pytest.raises(ValueError, match="close: encoder.layers.1.attention.output"):
        with ma.capture(model, names=["layers.1.attention.output:output"]):
            model(ids, mask)


def test_a_mean_ablation_of_the_heads_writes_takes_each_heads_own_mean():
    model = random_encoder("bert")
    ids, mask = _batch()
    name = "layers.1.attention.head_outputs"
    with torch.no_grad(), ma.capture(model, names=[name]) as clean:
        model(ids, mask)
    with torch.no_grad(), ma.capture(model, names=[name]) as cap, ma.patch(model, {name: ma.ablate_mean(1)}):
        model(ids, mask)
    writes = clean[name]  # (B, H, L, C)
    mean = writes[:, 1][mask.bool()].mean(0)  # (C,): head 1's mean over the real tokens
    torch.testing.assert_close(cap[name][:, 1], mean.expand_as(writes[:, 1]))
    assert torch.equal(cap[name][:, [0, 2, 3]], writes[:, [0, 2, 3]])


def test_a_stop_inside_or_around_a_patch_ends_the_forward_and_leaves_its_names_unchecked():
    model = random_encoder("bert")
    ids, mask = _batch()
    late = {"layers.2.attention.context": ma.ablate_heads(0)}  # after the stop: never reached, not an error
    after_patch = False
    with torch.no_grad(), ma.capture(model, names=["layers.*.output"], stop_after=0) as cap:
        with ma.patch(model, late):
            model(ids, mask)
        after_patch = True  # the stop is the capture's: its block ends, not only the patch's
    assert list(cap) == ["layers.0.output"] and cap.stopped and not after_patch
    with torch.no_grad(), ma.patch(model, late):
        with ma.capture(model, names=["layers.*.output"], stop_after="layers.1") as cap:
            model(ids, mask)
    assert list(cap) == ["layers.0.output", "layers.1.output"]
    with torch.no_grad(), pytest.raises(RuntimeError, match="boom"):  # another exception is not swallowed
        with ma.capture(model, stop_after=0):
            raise RuntimeError("boom")


def test_a_stopped_forward_still_checks_the_names_of_the_modules_it_ran():
    """Names of the layers a stop skipped are not errors; a typo in a layer that ran (or in a module the model lacks)
    still is, for names and patches alike."""
    model = random_encoder("bert")
    ids, mask = _batch()
    with torch.no_grad(), ma.capture(model, names=["layers.0.output", "layers.2.output", "pooler.output"],
                                     stop_after=1) as cap:
        model(ids, mask)
    assert list(cap) == ["layers.0.output"]
    for names, patches in ((["layers.0.ouptut"], {}), ([], {"layers.0.ffn_outptu": ma.ablate_mean()}),
                           (["layres.3.output"], {})):
        with pytest.raises(ValueError, match="no activation"):
            with torch.no_grad(), ma.capture(model, names=names, stop_after=1), ma.patch(model, patches):
                model(ids, mask)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_forward_resumed_at_a_layer_is_the_whole_forward(arch):
    """Encoder.forward(start_at_layer=i, residual=the captured layers.i.input) runs layers i.. alone and gives the
    whole forward's last hidden state, on a padded batch, packed or not; a capture then records from layer i on."""
    model = random_encoder(arch)
    ids, mask = _batch()
    with torch.no_grad():
        with ma.capture(model, names=["layers.*.input"]) as cap:
            whole = model(ids, mask).last_hidden_state
        for i in range(len(model.layers)):
            for unpad in (False, True):
                resumed = model(ids, mask, start_at_layer=i, residual=cap[f"layers.{i}.input"], unpad=unpad)
                torch.testing.assert_close(resumed.last_hidden_state[mask.bool()], whole[mask.bool()],
                                           atol=1e-5, rtol=0)
        with ma.capture(model, names=["layers.*.output"]) as later:
            model(ids, mask, start_at_layer=1, residual=cap["layers.1.input"])
    assert list(later) == [f"layers.{i}.output" for i in range(1, len(model.layers))]


def test_a_resumed_forward_names_bad_input():
    model = random_encoder("bert")
    ids, mask = _batch()
    good = torch.zeros(*ids.shape, 32)
    with pytest.raises(ValueError, match="start_at_layer must be a layer index in 0..2"):
        model(ids, mask, start_at_layer=3, residual=good)
    with pytest.raises(ValueError, match=r"\(B, L, C\) = \(2, 7, 32\)"):
        model(ids, mask, start_at_layer=1, residual=good[:, :3])
    with pytest.raises(ValueError, match="residual stream"):
        model(ids, mask, start_at_layer=1)
