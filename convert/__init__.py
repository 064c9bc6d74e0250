"""convert: the one place that knows foreign formats (each HF family's config.json and weight names in
its own file, families/<family>.py; AlignScore Lightning .ckpt, sentence-transformers files).

Readers open files (safetensors memory-mapped, pickles through a restricted unpickler, JSON), found by
name in a directory or any `Files` (minialign's Source fetches hub files on demand), and return plain
values; the name and config mappers are functions over dicts of tensors and config dicts; writers write
beside their destination and rename into place. Imports nothing from minialign.
"""

from .errors import CheckpointError
from .files import (
    Directory,
    Files,
    MissingFileError,
    as_files,
    find_weights,
    read_alignscore_ckpt,
    read_json,
    read_safetensors,
    read_state_dict,
    write_json,
    write_safetensors,
)
from .mapped import release
from . import families
from .by_model_type import (alignscore_to_minialign, foreign_format, hf_to_minialign,
                            minialign_to_alignscore, minialign_to_hf, split_hf_backbone)
from .flagembedding import M3_HEADS, read_m3_heads
from .formats import Adapters, Foreign, Format
from .pickles import load_pickle
from .sbert import (MULTIVECTOR_MODULES, PUNCTUATION, ModuleFiles, crossencoder_activation, pylate_settings,
                    read_dense, read_include_prompt, read_model_config, read_module_files,
                    read_modules, read_multivector_mask, read_pooling, read_prompts, read_router,
                    read_sentence_config, read_sparse_config, read_splade_pooling, read_static_embedding,
                    read_truncate_dim, write_module_files)

__all__ = [
    "Adapters",
    "CheckpointError",
    "Directory",
    "Files",
    "Foreign",
    "Format",
    "M3_HEADS",
    "MissingFileError",
    "ModuleFiles",
    "MULTIVECTOR_MODULES",
    "PUNCTUATION",
    "alignscore_to_minialign",
    "as_files",
    "crossencoder_activation",
    "families",
    "find_weights",
    "foreign_format",
    "hf_to_minialign",
    "load_pickle",
    "minialign_to_alignscore",
    "minialign_to_hf",
    "pylate_settings",
    "read_alignscore_ckpt",
    "read_dense",
    "read_include_prompt",
    "read_json",
    "read_m3_heads",
    "read_model_config",
    "read_module_files",
    "read_modules",
    "read_multivector_mask",
    "read_pooling",
    "read_prompts",
    "read_truncate_dim",
    "read_router",
    "read_sentence_config",
    "read_sparse_config",
    "read_splade_pooling",
    "read_static_embedding",
    "read_safetensors",
    "read_state_dict",
    "release",
    "split_hf_backbone",
    "write_json",
    "write_module_files",
    "write_safetensors",
]
