"""Make tests/models/data/transformers4_heads/: transformers v4's head_mask and prune_heads on tiny random models, for
tests/models/test_head_pruning.py. transformers 5 removed both, so the reference is made once under v4 and kept:

    python3 -m venv /tmp/tf4 && /tmp/tf4/bin/pip install torch==2.13.0 "transformers==4.57.1"
    /tmp/tf4/bin/python scripts/make_head_mask_reference.py tests/models/data/transformers4_heads

Each family gets `<family>/` (the model), `<family>-pruned/` (the same model after prune_heads, as v4 saves it:
config.json's pruned_heads, the smaller attention weights) and, in reference.pt, the inputs and v4's outputs:
last hidden state and attentions with a head mask, the pruned model's last hidden state.
"""

import sys
from pathlib import Path

import torch
import transformers

if int(transformers.__version__.split(".")[0]) != 4:
    sys.exit(f"transformers {transformers.__version__}: run this under transformers 4.x (5 has no head_mask)")

out = Path(sys.argv[1])
SIZES = dict(vocab_size=100, max_position_embeddings=16)
MODELS = {  # family -> (config, its layer sizes under the family's names), the bare model class
    "bert": (transformers.BertConfig(**SIZES, hidden_size=16, num_hidden_layers=3, num_attention_heads=4,
                                     intermediate_size=24), transformers.BertModel),
    "distilbert": (transformers.DistilBertConfig(**SIZES, dim=16, n_layers=3, n_heads=4, hidden_dim=24),
                   transformers.DistilBertModel),
    "roberta": (transformers.RobertaConfig(**{**SIZES, "max_position_embeddings": 18}, hidden_size=16,
                                           num_hidden_layers=3, num_attention_heads=4, intermediate_size=24),
                transformers.RobertaModel),
    "electra": (transformers.ElectraConfig(**SIZES, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                                           num_attention_heads=4, intermediate_size=24), transformers.ElectraModel),
    "mpnet": (transformers.MPNetConfig(**{**SIZES, "max_position_embeddings": 18}, hidden_size=16,
                                       num_hidden_layers=3, num_attention_heads=4, intermediate_size=24),
              transformers.MPNetModel),
}
UNPRUNABLE = {"mpnet"}  # v4's MPNet prunes the projections but not its relative bias (every head's): it breaks
PRUNE = {0: [0], 1: [2, 3]}

torch.manual_seed(0)
ids = torch.randint(5, 100, (2, 10))
mask = torch.ones_like(ids)
mask[1, 6:] = 0
head_mask = torch.ones(3, 4)
head_mask[0, 0], head_mask[1, 2], head_mask[2, 1] = 0.0, 0.0, 0.5  # silenced heads and a scaled one

reference = {"input_ids": ids, "attention_mask": mask, "head_mask": head_mask, "prune": PRUNE, "outputs": {}}
for family, (config, model_class) in MODELS.items():
    config._attn_implementation = "eager"
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    torch.manual_seed(1)
    model = model_class(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # non-zero biases and norms: a misplaced one cannot pass
            parameter.add_(torch.randn_like(parameter) * 0.02)
        model.save_pretrained(out / family)
        masked = model(ids, attention_mask=mask, head_mask=head_mask, output_attentions=True)
        reference["outputs"][family] = {"masked": masked.last_hidden_state, "attentions": masked.attentions}
        if family not in UNPRUNABLE:
            model.prune_heads(PRUNE)
            model.save_pretrained(out / f"{family}-pruned")
            reference["outputs"][family]["pruned"] = model(ids, attention_mask=mask).last_hidden_state
torch.save(reference, out / "reference.pt")
print(f"wrote {out} with transformers {transformers.__version__}")
