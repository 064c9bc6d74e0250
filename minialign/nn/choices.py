"""The names the encoder's options take, declared without torch: the command line offers them before anything
loads (apps/cli.py builds its parser from them), and nn/config.py and nn/score_functions.py build their tables
over them."""

# --dtype's names (the command line's, from_pretrained's), each with the torch dtype it means (config.DTYPES)
TORCH_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# --dtype's words for a precision on fp32 weights (loading/devices.py parse_dtype says what each means): "auto" and
# "auto-all" mixed bf16 where the device runs it natively (on the layers declared for it / on all four projections),
# "int8" the quantized mode
PRECISION_DTYPES = ("auto", "auto-all", "int8")
# Config.score_fn's names (score_functions.SCORE_CLASSES holds a module for each)
SCORE_FUNCTIONS = ("scaled_dot", "general", "bilinear", "additive", "location")
