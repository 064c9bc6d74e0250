"""The product table: each product declared once, and every face reads it.

    minialign <command> ...        apps/cli.py builds each command from the products that name it (their inputs,
                                   options, default model and help), one product per --method where several share one
    files (--input / --output)     the product's `job` (apps/files/jobs.py): which fields a row has, its output records
    Ray Data                       apps/raydata.py: a map_batches class per product (its `ray` name) over the same job
    the service                    apps/serve/: `--<name> SRC` loads it; POST /rows/<name> answers the file job's
                                   records for rows in a body; the protocols read it where its `serve_as` puts it

A product is its runner (products/: loads with the keywords every runner takes, products/runner.Loading, plus the
options of its own declared here) and the job that turns a block of rows into records. Adding one entry to
PRODUCTS (register) puts a product on every face; tests/apps/test_products.py registers a throwaway one and
finds it on all four. The anchor is sentence-transformers' modules.json (each module named, with its config).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from typing import TYPE_CHECKING, Any

from minialign.apps.files.formats import OUTPUT_FORMATS
from minialign.products import choices

if TYPE_CHECKING:
    from minialign.apps.files.rows import Fields
    from minialign.apps.files.run import Job
    from minialign.products.runner import Runner


class Imported:
    """A Product field holding an object or its import path, "module:name" (pkgutil.resolve_name's form): the table
    below names each runner and job by its path, so reading the table (the command line builds its parser from it)
    imports no product module and so no torch; a face reading the field gets the object, imported then. The
    dataclass's "descriptor-typed field" (the dataclasses docs)."""

    def __init__(self, default: Any = MISSING):
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, product: Any, owner: type | None = None) -> Any:
        if product is None:  # the dataclass asks for the field's default
            if self.default is MISSING:
                raise AttributeError(self.name)
            return self.default
        value = product.__dict__[self.name]
        return pkgutil.resolve_name(value) if isinstance(value, str) else value

    def __set__(self, product: Any, value: Any) -> None:
        product.__dict__[self.name] = value


@dataclass(frozen=True)
class Option:
    """A keyword of a product (its runner's from_pretrained's, or its job's), and its command-line flag."""

    name: str  # the Python keyword, e.g. "chunk_size"; the flag is --chunk-size
    default: Any = None
    help: str | None = None
    type: Callable[[str], Any] | None = None  # the flag's parser (str when None); a bool default is a switch
    choices: tuple | None = None
    exclusive: str | None = None  # options sharing this name exclude each other on the command line
    many: bool = False  # a list of values (of `type`): one comma-separated flag value ("": none), a JSON list

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, value: str) -> Any:
        """The flag's value as the option takes it: `type` of it, or of each comma-separated item (`many`)."""
        kind = self.type or str
        if self.many:
            return [kind(item.strip()) for item in value.split(",") if item.strip()]
        return kind(value)


@dataclass(frozen=True)
class Role:
    """A role of a row: the file / Ray field holding it (the role's name unless told, --<role>-field), and on the
    command line one value (--<role>)."""

    role: str
    help: str  # of --<role>, the command line's one value
    optional: bool = False  # a row may leave it out (or give null)

    @property
    def field_flag(self) -> str:
        return f"--{self.role}-field"


@dataclass(frozen=True)
class Product:
    """One product on every face (the module docstring).

    name      its name on the faces: --method NAME (several share a command), Ray's `product`, the service's
              --NAME flag and /rows/NAME
    runner    the Runner class (or its path, "module:Name": Imported); from_pretrained(model, **load options,
              **Loading keywords) loads it
    command   the command-line command it belongs to
    job       (runner, fields, *, model, **options) -> run.Job: the file and Ray shape of its outputs (jobs.py; a
              function or its path, as runner); `fields` are the roles' (Product.fields), its keywords `options`
    model     the default model (None: --model is required)
    load      the runner's own from_pretrained options the faces offer (beside the Loading keywords)
    options   the job's per-call options (the same loaded model serves each value)
    inputs    the roles of a row
    outputs   the file formats the command writes (formats.FORMATS' values)
    check     a row's problems known before the model loads (rows.Fields.check), e.g. AlignScore's claim
              needs a sentence; the loaded runner's own check applies in the job too (a function or its path)
    ray       the name of its Ray Data class (raydata.py)
    serve_as  where the service's protocols find it (serve/core.Models): "alignscore" (NeMo Guardrails'
              /alignscore_NAME and /score), "minicheck" (/minicheck, /score, HF text-classification), "embedder"
              (TEI's /embed, /similarity, POST /), "classifier" (TEI's /predict, /rerank, HF text-classification),
              "sparse" (TEI's /embed_sparse), "multivector" (TEI's /embed_all); None: Models.products, POST
              /rows/NAME (and its hf_task)
    hf_task   the HF Inference task it answers (huggingface_hub's InferenceClient): serve/hf_inference.HF_TASKS names
              its body's parameters and its handler; served on POST /pipeline/TASK and on POST / (serve/tei.py root)
    int8      whether --dtype offers int8 (the scorers refuse it: products/runner.refuse_int8)
    variants  runner classes (or paths) for the models `runner` does not load, each asked first whether a model is
              its kind (`handles(model, **load options)`): the embed product's StaticEncoder (a runner that
              subclasses `runner` cannot be chosen inside `runner.from_pretrained`: an import cycle)
    """

    name: str
    runner: type[Runner] | str = Imported()
    command: str
    job: Callable[..., Job] | str = Imported()
    model: str | None = None
    help: str = ""  # the command's help line (the first product of a command gives it)
    verb: str = "ran"  # what the command says it did: "scored 3 row(s) into out.jsonl"
    model_help: str = ""
    serve_help: str = ""  # of the service's --NAME flag
    load: tuple[Option, ...] = ()
    options: tuple[Option, ...] = ()
    inputs: tuple[Role, ...] = ()
    outputs: tuple[str, ...] = ("jsonl", "csv")
    check: Callable[[dict[str, str | None]], list[tuple[str, str]]] | str | None = Imported(None)
    ray: str = ""
    serve_as: str | None = None
    hf_task: str | None = None
    int8: bool = True
    variants: tuple[str, ...] = ()

    def fields(self, **named: str | None) -> Fields:
        """What a row holds: each role's field (<role>_field=..., default the role's name), as the file commands,
        Ray and /rows read it, with the product's pre-load check."""
        from minialign.apps.files.rows import Fields

        fields = {i.role: named.get(f"{i.role}_field") or i.role for i in self.inputs}
        return Fields(fields=fields, flags={i.role: i.field_flag for i in self.inputs},
                      optional=tuple(i.role for i in self.inputs if i.optional),
                      check=self.check or (lambda values: []))

    def load_runner(self, model: str | None, **keywords: Any) -> Runner:
        """The runner from `model` (default: the product's) and keywords (load options and Loading's; None: the
        default)."""
        if model is None and self.model is None:
            raise ValueError(f"{self.name}: a model is required")
        given = {k: v for k, v in keywords.items() if v is not None}
        model = self.model if model is None else model
        variants = (pkgutil.resolve_name(v) if isinstance(v, str) else v for v in self.variants)
        chosen = next((variant for variant in variants if variant.handles(model, **given)), self.runner)
        return chosen.from_pretrained(model, **given)

    def make_job(self, runner: Runner, *, model: str | None = None, **keywords: Any) -> Job:
        """The job over a loaded runner: keywords are <role>_field and the per-call options (others: ignored, so
        a face can hand over everything it was given; None: the default)."""
        fields = self.fields(**{f"{i.role}_field": keywords.get(f"{i.role}_field") for i in self.inputs})
        names = {o.name for o in self.options}
        return self.job(runner, fields, model=model,
                        **{k: v for k, v in keywords.items() if k in names and v is not None})


PRODUCTS: dict[str, Product] = {}


def register(product: Product) -> Product:
    """Add a product to the table (a later entry of the same name replaces it); every face reads the table when
    it runs (the command line when it builds its parser, the service when it starts, Ray per actor)."""
    PRODUCTS[product.name] = product
    return product


def unregister(name: str) -> None:
    PRODUCTS.pop(name, None)


def by_command() -> dict[str, list[Product]]:
    """Command name -> its products, in table order (the first is the command's default --method)."""
    out: dict[str, list[Product]] = {}
    for product in PRODUCTS.values():
        out.setdefault(product.command, []).append(product)
    return out


def _alignscore_check(values: dict[str, str | None]) -> list[tuple[str, str]]:
    """AlignScorer.check with its default splitter, before the model loads: a claim needs a sentence."""
    from minialign.products import alignscore
    from minialign.text.sentences import split_sentences

    return alignscore.check_example(values["context"], values["claim"], split_sentences, null="null")[0]


def _qa_check(values: dict[str, str | None]) -> list[tuple[str, str]]:
    """QuestionAnswerer's check of a question and a context, before the model loads."""
    from minialign.products.question_answering import check_values

    return check_values(values["question"], values["context"], null="null")


TOKENIZER = Option("tokenizer", help="tokenizer dir or hub id (default: beside the model)")
PAIR_INPUTS = (Role("context", "the context (premise, document) text"),
               Role("claim", "the claim (hypothesis) text"))

register(Product(
    name="alignscore", command="score", verb="scored",
    runner="minialign.products.alignscore:AlignScorer", job="minialign.apps.files.jobs:score_job",
    model=choices.ALIGNSCORE_MODEL,
    help="AlignScore (or MiniCheck) a claim against a context, or a JSONL/CSV file",
    model_help="AlignScore-base (default) / AlignScore-large, a .ckpt, or a minialign / HF directory",
    serve_help="an AlignScore model for /alignscore_NAME (base or large; AlignScore-large -> large); repeat for both",
    load=(Option("backbone", help="for a .ckpt: backbone dir (config.json + tokenizer) or hub id"),
          Option("tokenizer", help="tokenizer dir or hub id (default: beside the model or backbone)"),
          Option("mode", choices.ALIGNSCORE_MODE, help="alignscore only", choices=choices.ALIGNSCORE_MODES)),
    inputs=PAIR_INPUTS, check=_alignscore_check, ray="AlignScoreBatches", serve_as="alignscore", int8=False))

# minicheck and factcg: how much of a document one chunk holds (None: each scorer's own default)
CHUNK = Option("chunk_size", type=int,
               help=f"minicheck: tokens per document chunk (default {choices.MINICHECK_CHUNK_SIZE}; a MiniCheck-Flan-T5 "
                    f"model: words, default {choices.MINICHECK_T5_CHUNK_WORDS}); factcg: words per chunk (default "
                    f"{choices.FACTCG_CHUNK_WORDS})")

register(Product(
    name="minicheck", command="score", verb="scored",
    runner="minialign.products.minicheck:MiniCheckScorer", job="minialign.apps.files.jobs:score_job",
    model=choices.MINICHECK_MODEL,
    model_help=f"a MiniCheck classifier directory or hub id (default {choices.MINICHECK_MODEL}), or "
               f"lytang/MiniCheck-Flan-T5-Large",
    serve_help="a MiniCheck model for POST /minicheck (AlignScore's request shapes and HF Inference's "
               "text-classification) and /score with \"model\": \"minicheck\"",
    load=(Option("tokenizer", help="tokenizer dir or hub id (default: beside the model or backbone)"), CHUNK),
    inputs=PAIR_INPUTS, ray="MiniCheckBatches", serve_as="minicheck", int8=False))

register(Product(
    name="factcg", command="score", verb="scored",
    runner="minialign.products.factcg:FactCGScorer", job="minialign.apps.files.jobs:score_job",
    model=choices.FACTCG_MODEL,
    model_help=f"a FactCG classifier directory or hub id (default {choices.FACTCG_MODEL})",
    serve_help="a FactCG model for POST /rows/factcg: P(supported) of each (context, claim) row",
    load=(TOKENIZER, CHUNK), inputs=PAIR_INPUTS, ray="FactCGBatches", int8=False))

# lettuce and hhem: the window (None: each runner's own default)
WINDOW = Option("max_length", type=int,
                help=f"lettuce, hhem: the window in tokens, within the model's positions (default: lettuce "
                     f"{choices.LETTUCE_MAX_LENGTH}, as lettucedetect, a context past it read in chunks of passages; "
                     f"hhem none, as its predict, a cut reported)")

register(Product(
    name="hhem", command="score", verb="scored",
    runner="minialign.products.hhem:HHEM", job="minialign.apps.files.jobs:score_job", model=choices.HHEM_MODEL,
    model_help=f"HHEM-2.1-open's directory or hub id (default {choices.HHEM_MODEL}; its T5 from --foundation)",
    serve_help="HHEM-2.1-open for POST /rows/hhem: P(consistent) of each (context, claim) row",
    load=(TOKENIZER, Option("foundation", help="hhem only: the T5 its config.json names (default "
                                               "google/flan-t5-base), a directory or hub id"), WINDOW),
    inputs=PAIR_INPUTS, ray="HHEMBatches", int8=False))

register(Product(
    name="lettuce", command="score", verb="scored",
    runner="minialign.products.lettuce:HallucinationDetector", job="minialign.apps.files.jobs:lettuce_job",
    model_help="a LettuceDetect token classifier directory or hub id (KRLabsOrg/lettucedect-base-modernbert-en-v1, "
               "...)",
    serve_help="a LettuceDetect model for POST /rows/lettuce: the hallucinated spans of each row's answer",
    load=(TOKENIZER,
          Option("lang", choices.LETTUCE_LANG, help="lettuce only: the prompt templates' language",
                 choices=choices.LETTUCE_LANGS),
          WINDOW),
    options=(Option("tokens", False,
                    help="lettuce only: every answer token's probability (lettucedetect's output_format \"tokens\") "
                         "in place of the hallucinated spans (character offsets into the answer, confidence)"),
             Option("min_confidence", 0.0, type=float,
                    help="lettuce only: the least probability of a hallucinated token (lettucedetect's threshold)")),
    inputs=(Role("context", "the context (premise, document) text"),
            Role("answer", "lettuce: the answer whose hallucinated spans are found"),
            Role("question", "lettuce: the question the answer answers (none: a summary)", optional=True)),
    outputs=("jsonl",), ray="LettuceBatches", int8=False))

# embed, sparse, multivector: queries or documents (each product's encode_query / encode_document)
TASK = Option("task", choices=choices.TASKS,
              help="embed as queries or as documents (encode_query / encode_document: their prompt, unless "
                   "--prompt-name or --prompt names one; sparse, multivector: also a ColBERT model's query or "
                   "document window and expansion, an inference-free SPLADE model's route); default: encode's")

register(Product(
    name="embed", command="embed", verb="embedded",
    runner="minialign.products.embeddings:SentenceEncoder", job="minialign.apps.files.jobs:embed_job",
    variants=("minialign.products.static:StaticEncoder",),
    outputs=OUTPUT_FORMATS["embed"],
    help="sentence embeddings of a text, or of a JSONL/CSV file (.jsonl or .safetensors out)",
    model_help="a sentence-transformers or HF directory, or a hub id",
    serve_help="an embedding model for TEI's /embed (and POST /)",
    options=(Option("normalize", choices.EMBED_NORMALIZE, help="unit-length embeddings"),
             TASK,
             Option("prompt_name", exclusive="prompt",
                    help="one of the model's prompts (config_sentence_transformers.json), put before every text "
                         "(default: the model's default_prompt_name, if any)"),
             Option("prompt", exclusive="prompt",
                    help="a prompt text put before every text (\"\": none, not even the default)"),
             Option("truncate_dim", type=int,
                    help="keep the first N dimensions (a Matryoshka model's shorter embedding), before --normalize "
                         "(default: the model's truncate_dim, else all)"),
             Option("precision", choices=choices.PRECISIONS,
                    help="int8 / uint8: 256 buckets per dimension between the --calibration texts' minimum and "
                         "maximum; binary / ubinary: one bit per dimension (x > 0), 8 to a byte; as "
                         "sentence-transformers' quantize_embeddings (default: SentenceEncoder.encode's)"),
             Option("calibration",
                    help="with --precision int8 / uint8: a .jsonl, .csv or .tsv file of texts (the same --text-field) "
                         "whose embeddings fix each dimension's range, as calibration_embeddings= in Python")),
    inputs=(Role("text", "one text: prints its embedding as a JSON list"),),
    ray="EmbedBatches", serve_as="embedder"))

register(Product(
    name="classify", command="classify", verb="classified",
    runner="minialign.products.classifier:Classifier", job="minialign.apps.files.jobs:classify_job",
    help="classify a text or pair, or a JSONL/CSV file (labels and scores)",
    model_help="a *ForSequenceClassification directory or hub id",
    serve_help="a classifier or reranker for TEI's /predict and /rerank",
    load=(TOKENIZER,),
    options=(Option("activation", choices.CLASSIFIER_ACTIVATION, choices=choices.CLASSIFIER_ACTIVATIONS),),
    inputs=(Role("text", "one text: prints its label and scores as JSON"),
            Role("pair", "with --text: the second text of a pair", optional=True)),
    ray="ClassifyBatches", serve_as="classifier", hf_task="text-classification"))

# Retrieval embeddings beyond one vector per text: `embed --method sparse | multivector | m3` (one command, as
# `score --method minicheck`: each reads a text per row and writes .jsonl or .safetensors; the file layouts are
# the jobs', apps/files/jobs.py).
PROMPT_OPTIONS = (Option("prompt_name", exclusive="prompt",
                         help="one of the model's prompts (config_sentence_transformers.json), put before every text "
                              "(default: the task's prompt, else the model's default_prompt_name, if any)"),
                  Option("prompt", exclusive="prompt",
                         help="a prompt text put before every text (\"\": none, not even the default)"))
TEXT = Role("text", "one text: prints its embedding as JSON (embed: a list; sparse, multivector, m3: the record a "
                     "file row gets)")
register(Product(
    name="sparse", command="embed", verb="embedded",
    runner="minialign.products.sparse:SparseEncoder", job="minialign.apps.files.jobs:sparse_job",
    outputs=OUTPUT_FORMATS["embed"],
    model_help="a sentence-transformers SparseEncoder (SPLADE) directory or a *ForMaskedLM one, or a hub id",
    serve_help="a SPLADE model (SparseEncoder) for TEI's /embed_sparse",
    options=(TASK, *PROMPT_OPTIONS,
             Option("max_active_dims", type=int, help="sparse only: keep each row's largest N values "
                                                      "(default: the model's, else all)")),
    inputs=(TEXT,),
    ray="SparseBatches", serve_as="sparse"))

register(Product(
    name="multivector", command="embed", verb="embedded",
    runner="minialign.products.multivector:MultiVectorEncoder", job="minialign.apps.files.jobs:multivector_job",
    outputs=OUTPUT_FORMATS["embed"],
    model_help="a sentence-transformers MultiVectorEncoder, PyLate or Stanford-NLP ColBERT directory, or a hub id",
    serve_help="a multi-vector (ColBERT) model for TEI's /embed_all (its token vectors)",
    options=(TASK, *PROMPT_OPTIONS),
    inputs=(TEXT,),
    ray="MultiVectorBatches", serve_as="multivector"))

register(Product(
    name="m3", command="embed", verb="embedded",
    runner="minialign.products.m3:M3Encoder", job="minialign.apps.files.jobs:m3_job",
    outputs=OUTPUT_FORMATS["embed"],
    model_help="a BGE-M3 directory (XLM-RoBERTa with sparse_linear.pt, colbert_linear.pt) or hub id",
    serve_help="a BGE-M3 model for POST /rows/m3 (dense, lexical and colbert outputs)",
    options=(Option("return_dense", choices.M3_RETURN_DENSE, help="m3 only: the dense vector (\"dense_vecs\")"),
             Option("return_sparse", choices.M3_RETURN_SPARSE,
                    help="m3 only: the lexical weights (\"lexical_weights\")"),
             Option("return_colbert_vecs", choices.M3_RETURN_COLBERT_VECS,
                    help="m3 only: the colbert vectors (\"colbert_vecs\")"),
             Option("max_length", type=int, help="m3 only: the window (default: the model's)")),
    inputs=(TEXT,),
    ray="M3Batches"))

# The token heads have commands of their own, not --method of `classify`: a row's input and its record differ
# from a classifier's (ner: a text in, a list of entities out, .jsonl only; fill-mask: a text with a mask token;
# zero-shot: a text and candidate labels; qa: a question and a context, an answer span out), and so do their
# options; `classify --method ner` would offer every one of them on one command, each refused by the others.
register(Product(
    name="ner", command="ner", verb="tagged",
    runner="minialign.products.token_classification:TokenClassifier", job="minialign.apps.files.jobs:ner_job",
    outputs=OUTPUT_FORMATS["ner"],
    help="named entities (or other per-token labels) of a text, or of a JSONL/CSV file (.jsonl out)",
    model_help="a *ForTokenClassification directory or hub id (dslim/bert-base-NER, ...)",
    serve_help="a token classifier (NER) for POST /rows/ner and HF Inference's token-classification",
    load=(TOKENIZER,),
    options=(Option("aggregation_strategy", choices.NER_AGGREGATION, choices=choices.AGGREGATIONS,
                    help="none: one entity per token; simple: adjacent tokens of one entity grouped; first / "
                         "average / max: each word's tokens under one label first, then grouped (transformers' "
                         "pipeline's)"),
             Option("ignore_labels", many=True,
                    help="labels left out, comma-separated (default: O; \"\": none)"),
             Option("stride", type=int,
                    help="read a text longer than the window in windows overlapping by N tokens (not with "
                         "--aggregation-strategy none); default: cut at the window")),
    inputs=(Role("text", "one text: prints its entities as a JSON list"),),
    ray="NERBatches", hf_task="token-classification"))

register(Product(
    name="fill-mask", command="fill-mask", verb="filled",
    runner="minialign.products.fill_mask:FillMask", job="minialign.apps.files.jobs:fill_mask_job",
    outputs=OUTPUT_FORMATS["fill-mask"],
    help="the likeliest tokens for the mask token(s) of a text, or of a JSONL/CSV file (.jsonl out)",
    model_help="a *ForMaskedLM directory or hub id (google-bert/bert-base-uncased, FacebookAI/roberta-base, ...)",
    serve_help="a masked-LM model (fill-mask) for POST /rows/fill-mask and HF Inference's fill-mask",
    load=(TOKENIZER,),
    options=(Option("top_k", choices.FILL_MASK_TOP_K, type=int,
                    help="candidates per mask, best first (default %(default)s)"),
             Option("targets", many=True,
                    help="score these tokens only, comma-separated (one the vocabulary lacks: its first token, with "
                         "a warning; default: every token)")),
    inputs=(Role("text", "one text holding the model's mask token ([MASK], <mask>): prints its candidates as JSON "
                          "(a list per mask)"),),
    ray="FillMaskBatches", hf_task="fill-mask"))

register(Product(
    name="qa", command="qa", verb="answered",
    runner="minialign.products.question_answering:QuestionAnswerer", job="minialign.apps.files.jobs:qa_job",
    outputs=OUTPUT_FORMATS["qa"],
    help="extractive question answering: the answer to a question from a context, or for a JSONL/CSV file of them",
    model_help="a *ForQuestionAnswering directory or hub id (deepset/roberta-base-squad2, ...)",
    serve_help="an extractive QA model for POST /rows/qa and HF Inference's question-answering",
    load=(TOKENIZER,),
    options=(Option("top_k", choices.QA_TOP_K, type=int,
                    help="how many answers, best first: 1 gives the best answer's record (.jsonl or .csv), more a list "
                         "{\"answers\": [...]} per row (.jsonl only)"),
             Option("doc_stride", type=int,
                    help="a context longer than a window is read in windows sharing N tokens with the one before "
                         "(default: min(max_seq_len // 2, 128))"),
             Option("max_answer_len", choices.QA_MAX_ANSWER_LEN, type=int, help="the most tokens of an answer"),
             Option("max_seq_len", type=int,
                    help="a window's tokens, the question and special tokens included (default: min(the tokenizer's "
                         "model_max_length, 384), within the model's positions)"),
             Option("max_question_len", choices.QA_MAX_QUESTION_LEN, type=int,
                    help="taken and unused, as in transformers 4's pipeline with a fast tokenizer"),
             Option("handle_impossible_answer", choices.QA_HANDLE_IMPOSSIBLE_ANSWER,
                    help="also offer \"no answer\" ({\"score\", \"start\": 0, \"end\": 0, \"answer\": \"\"}), scored "
                         "by the CLS token (squad2 models)"),
             Option("align_to_words", choices.QA_ALIGN_TO_WORDS,
                    help="widen a span to whole words (--no-align-to-words: the tokens' own characters)")),
    inputs=(Role("question", "the question: with --context, prints the answer as JSON (a list with --top-k > 1)"),
            Role("context", "the text the answer is read from")),
    check=_qa_check,
    ray="QABatches", hf_task="question-answering"))

# zero-shot: the candidate labels are an option of the call (the pipeline's candidate_labels: --candidate-labels,
# HF Inference's parameters.candidate_labels), the same for every row of a file; a file whose rows carry their own
# names their field (--candidate-labels-field, a comma-separated string per row), and a row without it takes the
# flag's. The service's HF task puts each request's labels in its row (serve/hf_inference.py), so requests with
# different labels share one job and one model call.
register(Product(
    name="zero-shot", command="zero-shot", verb="classified",
    runner="minialign.products.zero_shot:ZeroShotClassifier", job="minialign.apps.files.jobs:zero_shot_job",
    outputs=OUTPUT_FORMATS["zero-shot"],
    help="zero-shot classification of a text, or of a JSONL/CSV file, into labels chosen per call (.jsonl out)",
    model_help="an NLI *ForSequenceClassification directory or hub id (MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli, "
               "FacebookAI/roberta-large-mnli, ...)",
    serve_help="an NLI model for POST /rows/zero-shot and HF Inference's zero-shot-classification",
    load=(TOKENIZER,),
    options=(Option("candidate_labels", many=True,
                    help="the labels to choose from, comma-separated (split as the pipeline splits a string); with "
                         "--input, every row's unless --candidate-labels-field gives a row its own"),
             Option("candidate_labels_field",
                    help="with --input: the field holding a row's own candidate labels (a comma-separated string); "
                         "a row without it takes --candidate-labels"),
             Option("hypothesis_template", choices.ZERO_SHOT_TEMPLATE,
                    help="the hypothesis each label is put into, at {} (default: \"%(default)s\")"),
             Option("multi_label", choices.ZERO_SHOT_MULTI_LABEL,
                    help="score each label on its own (entailment against contradiction of its pair), not a softmax "
                         "over the labels")),
    inputs=(Role("text", "one text: prints the pipeline's {\"sequence\", \"labels\", \"scores\"} as JSON"),),
    check="minialign.apps.files.jobs:empty_text_problems", ray="ZeroShotBatches", hf_task="zero-shot-classification"))
