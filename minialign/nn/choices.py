"""The names the encoder's options take, declared without torch: the command line offers them before anything
loads (apps/cli.py builds its parser from them), and nn/config.py and nn/score_functions.py build their tables
over them."""

# --dtype's names (the command line's, from_pretrained's), each with the torch dtype it means (config.DTYPES)
TORCH_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Config.score_fn's names (score_functions.SCORE_CLASSES holds a module for each)
SCORE_FUNCTIONS = ("scaled_dot", "general", "bilinear", "additive", "location")
