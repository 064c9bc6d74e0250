"""Every route's request and response bodies, declared once as pydantic v2 types (the `serve` extra): the handlers
validate a request's body with its type (`parse`), GET /openapi.json describes each route by them (serve/spec.py),
and the docs page renders that document (serve/api_page.py).

Validation is strict, as the hand checks it replaces were: a string is a JSON string (never a number), a boolean a
JSON boolean, an integer a JSON integer (never a boolean); a null where a field has a default is that default; fields
a body adds are ignored, except inside the objects a protocol defines whole (HF Inference's {"text", "text_pair"},
question-answering's {"question", "context"}). A field that mirrors a runner's keyword takes its default from the
runner's signature (`default_of`); where a protocol's own default differs, the field says so and cites it.

A body that does not fit its type is a 422 naming the field by its path ("inputs[3]", "pairs[0].claim",
"inputs.text_pair"), in the route's protocol's error shape (serve/app.py): `problem` says each pydantic error the way
the service's other errors say theirs. What the types cannot express stays with the handlers, the runners and the
core: an empty batch (400 Empty), a batch over --max-client-batch-size or an input over the window (413), a model or
prompt name that is not loaded, a product's own check of its inputs (a claim with no sentence).
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationError, create_model,
                      WithJsonSchema, model_validator)
from pydantic_core import PydanticCustomError

from minialign.apps.products import Option, Product
from minialign.apps.serve.core import ServiceError, bad_request, missing
from minialign.products.alignscore import AlignScorer, DEFAULT_MODE, MODES
from minialign.products.choices import TASKS
from minialign.products.classifier import Classifier
from minialign.products.embeddings import SentenceEncoder
from minialign.text.tokenizer import Tokenizer
from minialign.text.validation import text_problem


def default_of(function: Any, name: str) -> Any:
    """The default of keyword `name` in `function`'s signature: a body field mirroring a runner's keyword reads it
    here, never retyped."""
    return inspect.signature(function).parameters[name].default


# -- the values ------------------------------------------------------------------------------------------------

def _text(value: Any) -> Any:
    if isinstance(value, str) and (problem := text_problem(value)):  # what the tokenizer cannot encode
        raise PydanticCustomError("text", "{problem}", {"problem": problem})  # the text is no template
    return value


def _one_or_many(value: Any) -> Any:
    """A string is a list of one (TEI's Input::Single; OpenAI's and HF Inference's string `inputs`)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise PydanticCustomError("texts_type", "a string or a list of strings")
    return value


Text = Annotated[str, BeforeValidator(_text)]
Texts = Annotated[list[Text], BeforeValidator(_one_or_many),
                  WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})]
PositiveInt = Annotated[int, Field(ge=1)]
ModelName = Annotated[str | None, Field(description="a name the model is served by (GET /info; serve/names.py)")]
PromptName = Annotated[str | None, Field(default_of(SentenceEncoder.encode, "prompt_name"), description=(
    "the name of one of the model's prompts (GET /info `prompts`); absent or null: its default prompt, if any"))]
# TEI's own default (router/src/http/types.rs: `truncate: Option<bool>`, None: the router's --auto-truncate, off):
# an input over the window is refused (413), where the runners cut it
Truncate = Annotated[bool, Field(False, description="cut an input over the model's window to it (false: 413)")]


class Body(BaseModel):
    """A request body: strict, extra fields ignored, a null where a field has a default read as that default."""

    model_config = ConfigDict(strict=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(v is None for v in data.values()):
            fields = cls.model_fields
            return {k: v for k, v in data.items()
                    if not (v is None and k in fields and not fields[k].is_required())}
        return data


class Answer(BaseModel):
    """A response body (the service writes it as JSON; the type describes it in GET /openapi.json)."""


# -- TEI (tei.py; text-embeddings-inference's router/src/http/types.rs) ----------------------------------------

class EmbedRequest(Body):
    inputs: Texts = Field(description="a text or a list of texts")
    # TEI's default (types.rs EmbedRequest: default_normalize() -> true); SentenceEncoder.encode's is false
    normalize: bool = Field(True, description="unit-length embeddings (after `dimensions`)")
    truncate: Truncate
    prompt_name: PromptName
    dimensions: PositiveInt | None = Field(default_of(SentenceEncoder.encode, "truncate_dim"), description=(
        "keep the first dimensions of each embedding (a Matryoshka model's shorter one), at most the model's"))


class TokensRequest(Body):
    """/embed_sparse's and /embed_all's body."""

    inputs: Texts = Field(description="a text or a list of texts")
    truncate: Truncate
    prompt_name: PromptName
    task: Literal[tuple(TASKS)] | None = Field(None, description=(  # type: ignore[valid-type]
        "encode_query / encode_document's prompt, window and route; absent: encode's"))
    truncation_direction: Literal["right", "Right"] | None = Field(None, description=(
        "where an input is cut: the end (TEI's \"left\" is not served)"))
    model: ModelName = None


Pair = Annotated[list[Text], Field(min_length=1, max_length=2)]


def predict_form(value: Any) -> str:
    if isinstance(value, list):
        return "batch" if all(isinstance(v, list) for v in value) else "pair"
    return "text"


PredictInput = Annotated[Union[Annotated[Text, Tag("text")], Annotated[Pair, Tag("pair")],
                               Annotated[list[Pair], Tag("batch")]], Discriminator(predict_form)]


class PredictRequest(Body):
    inputs: PredictInput = Field(description="a text, a pair [text, text], or a batch of those ([[a], [b, c]])")
    raw_scores: bool = Field(False, description="the logits, not the probabilities (TEI's default: false)")
    truncate: Truncate


class RerankRequest(Body):
    query: Text = Field(description="the query")
    texts: list[Text] = Field(description="the documents, ranked against the query")
    raw_scores: bool = Field(False, description="the logits, not the sigmoid (TEI's default: false)")
    return_text: bool = Field(False, description="each result carries its text (TEI's default: false)")
    truncate: Truncate


class SimilarityInputs(Body):
    source_sentence: Text = Field(description="the text the others are compared with")
    sentences: list[Text] = Field(description="the texts compared with the source")


class SimilarityParameters(Body):
    truncate: Truncate
    prompt_name: PromptName


class SimilarityRequest(Body):
    inputs: SimilarityInputs
    parameters: SimilarityParameters = Field(default_factory=SimilarityParameters)


class TokenizeRequest(Body):
    inputs: Texts = Field(description="a text or a list of texts")
    add_special_tokens: bool = Field(True, description="the model's special tokens around each input")
    prompt_name: PromptName
    model: ModelName = None


TokenIds = list[int]  # each from 0 to the vocabulary's size: the handler's check (tei.decode)


def ids_form(value: Any) -> str:
    return "batch" if isinstance(value, list) and value and all(isinstance(v, list) for v in value) else "ids"


class DecodeRequest(Body):
    ids: Annotated[Union[Annotated[TokenIds, Tag("ids")], Annotated[list[TokenIds], Tag("batch")]],
                   Discriminator(ids_form)] = Field(description="token ids, or a list of those")
    skip_special_tokens: bool = Field(default_of(Tokenizer.decode, "skip_special_tokens"),
                                      description="leave the special tokens out")
    model: ModelName = None


class Label(Answer):
    label: str
    score: float


class Ranked(Answer):
    index: int = Field(description="the document's place in the request")
    score: float
    text: str | None = Field(None, description="with return_text")


class SparseValue(Answer):
    index: int
    value: float


class Token(Answer):
    id: int
    text: str
    special: bool
    start: int | None = Field(description="the token's first character in the input (null: a special token)")
    stop: int | None


class TEIError(Answer):
    error: str
    error_type: str = Field(description="Validation, Empty, Backend, Overloaded, Unhealthy, NotFound, ...")


# -- OpenAI (openai.py) ------------------------------------------------------------------------------------------

def _openai_input(value: Any) -> Any:
    if isinstance(value, list) and value and all(
            (isinstance(v, int) and not isinstance(v, bool)) or
            (isinstance(v, list) and v and all(isinstance(i, int) for i in v)) for v in value):
        raise PydanticCustomError("token_ids", "as token ids is not supported: send the text (a string or a list "
                                               "of strings)")
    return value


class EmbeddingsRequest(Body):
    input: Annotated[Texts, BeforeValidator(_openai_input)] = Field(description="a text or a list of texts")
    model: str = Field(description="a name the embedding model is served by (GET /v1/models)")
    encoding_format: Literal["float", "base64"] = Field("float", description=(
        "\"base64\": each embedding's float32 values, little-endian bytes"))
    dimensions: PositiveInt | None = Field(default_of(SentenceEncoder.encode, "truncate_dim"), description=(
        "keep the first dimensions of each embedding, before normalizing"))
    user: str | None = None
    prompt_name: PromptName  # TEI's extra fields (the client's extra_body)
    truncate: Truncate


class Embedding(Answer):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class Usage(Answer):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(Answer):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: Usage


class ModelCard(Answer):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(Answer):
    object: Literal["list"]
    data: list[ModelCard]


class OpenAIErrorDetail(Answer):
    message: str
    type: str
    param: str | None
    code: str


class OpenAIError(Answer):
    error: OpenAIErrorDetail


# -- Cohere (cohere.py) ------------------------------------------------------------------------------------------

class Document(Body):
    """A v1 document as an object: its `text` is ranked, its other fields come back with it."""

    model_config = ConfigDict(strict=True, extra="allow")
    text: Text


RANK_TOP = default_of(Classifier.rank, "top_k")


class RerankV2Request(Body):
    model: str = Field(description="a name the reranker is served by")
    query: Text
    documents: list[Text]
    top_n: PositiveInt | None = Field(RANK_TOP, description="the best N results (absent: all)")
    max_tokens_per_doc: PositiveInt | None = Field(None, description="cut each document to its first N tokens")


def _by_text(value: Any) -> Any:
    if value != ["text"]:
        raise PydanticCustomError("refused", "{given}: documents are ranked by their `text` only",
                                  {"given": repr(value)[:100]})
    return value


def _document_form(value: Any) -> str:
    return "object" if isinstance(value, dict) else "text"


class RerankV1Request(Body):
    model: str | None = Field(None, description="a name the reranker is served by")
    query: Text
    documents: list[Annotated[Union[Annotated[Text, Tag("text")], Annotated[Document, Tag("object")]],
                              Discriminator(_document_form)]]
    top_n: PositiveInt | None = Field(RANK_TOP, description="the best N results (absent: all)")
    max_tokens_per_doc: PositiveInt | None = Field(None, description="cut each document to its first N tokens")
    return_documents: bool = Field(False, description="each result carries its document as sent (Cohere's "
                                                      "default: false)")
    rank_fields: Annotated[list[Literal["text"]], BeforeValidator(_by_text)] | None = Field(
        None, description="documents are ranked by their `text` only")
    max_chunks_per_doc: Annotated[int, Field(ge=1, le=1)] | None = Field(None, description=(
        "a document is read as one chunk (the model's window): 1 only"))


class CohereResult(Answer):
    index: int
    relevance_score: float
    document: dict[str, Any] | None = Field(None, description="v1 with return_documents")


class CohereResponse(Answer):
    id: str
    results: list[CohereResult]
    meta: dict[str, Any]
    model: str | None = Field(None, description="v1")
    usage: dict[str, int] | None = Field(None, description="v1: {\"total_tokens\"}")


class CohereError(Answer):
    message: str


# -- NeMo Guardrails' AlignScore API and /score (nemo.py) --------------------------------------------------------

# the context and claim go to the scorer's own check (PairScorer.check), which names what it refuses: plain str here
class NemoRequest(Body):
    evidence: str | list[Text] = Field(description="the evidence: a text, or texts joined by spaces")
    claim: str = Field(description="the claim checked against the evidence")


class ScorePair(Body):
    context: str
    claim: str


class ScoreRequest(Body):
    pairs: list[ScorePair]
    model: str | None = Field(None, description="an AlignScore route name (default: the first loaded), "
                                                "\"minicheck\", a pair scorer's name, or the name a model is served "
                                                "by (--served-model-name)")
    # AlignScorer.score's mode None is its default mode, DEFAULT_MODE
    mode: Literal[MODES] | None = Field(None, description=f"AlignScore's (default {DEFAULT_MODE!r})")  # type: ignore
    details: bool = Field(default_of(AlignScorer.score, "return_details"), description="each pair's details too")


class ScoreResponse(Answer):
    scores: list[float]
    details: list[dict[str, Any]] | None = None


# -- HF Inference (hf_inference.py) --------------------------------------------------------------------------------

class TextPair(Body):
    model_config = ConfigDict(strict=True, extra="forbid")
    text: Text
    text_pair: Text | None = None


def _pair_form(value: Any) -> str:
    return "pair" if isinstance(value, dict) else "text"


class TextClassificationParameters(Body):
    top_k: PositiveInt | None = Field(None, description="the best K labels (absent: all)")
    function_to_apply: Literal["sigmoid", "softmax", "none"] | None = Field(None, description=(
        "absent: the classifier's own (transformers' pipeline rule)"))


class TextClassificationRequest(Body):
    inputs: Annotated[Union[Annotated[Text, Tag("text")], Annotated[TextPair, Tag("pair")]],
                      Discriminator(_pair_form)] = Field(description="a text, or a pair {\"text\", \"text_pair\"}")
    parameters: TextClassificationParameters = Field(default_factory=TextClassificationParameters)
    truncate: Truncate


class TaskRequest(Body):
    """An HF Inference task of the table's products; `parameters` are its product's options, checked as POST
    /rows/NAME checks them (serve/rows.py)."""

    inputs: Text
    parameters: dict[str, Any] = Field(default_factory=dict, description="the task's parameters")
    truncate: Truncate


class QuestionContext(Body):
    model_config = ConfigDict(strict=True, extra="forbid")
    question: Text
    context: Text


class QuestionAnsweringRequest(TaskRequest):
    inputs: QuestionContext  # type: ignore[assignment]


class Answered(Answer):
    score: float
    start: int
    end: int
    answer: str


# POST / takes any of these, routed by the body's shape (tei.root)
RootRequest = Union[EmbedRequest, PredictRequest, RerankRequest, SimilarityRequest, TextClassificationRequest,
                    TaskRequest, QuestionAnsweringRequest]


# -- /rows/NAME (rows.py) ----------------------------------------------------------------------------------------

class RowsRequest(Body):
    rows: list[dict[str, Any]] = Field(description="each row's inputs by role, and its id")
    options: dict[str, Any] = Field(default_factory=dict, description="the product's per-call options")
    id_field: str = Field("id", description="the rows' field holding their ids")


class RowsResponse(Answer):
    results: list[dict[str, Any]]


# -- a product's options, typed from the product table (apps/products.py Option) ---------------------------------

def _option_type(option: Option) -> Any:
    """An option's JSON type: its default's bool, its parser's int / float / str (str where it has none), any value
    for another parser (the job checks it: OptionError); one of its choices where it has them; a list where it takes
    several; null as its absence."""
    kind: Any = bool if isinstance(option.default, bool) else option.type or str
    if kind not in (bool, int, float, str):
        kind = Any
    if option.choices is not None:
        kind = Literal[tuple(option.choices)]
    return (list[kind] if option.many else kind) | None


_OPTIONS: dict[tuple[str, tuple[str, ...] | None], type[Body]] = {}


def options_type(product: Product, names: tuple[str, ...] | None = None) -> type[Body]:
    """A product's per-call options (`names` of them: an HF task's parameters; None: all) as one type, each field
    of its Option's type and default (the runner's: products/choices.py) and help: what POST /rows/NAME's `options`
    and an HF task's `parameters` are validated with and described by."""
    key = (product.name, names)
    if key not in _OPTIONS:
        fields = {o.name: (_option_type(o), Field(o.default, description=o.help))
                  for o in product.options if names is None or o.name in names}
        title = "".join(part.title() for part in product.name.replace("-", "_").split("_"))
        _OPTIONS[key] = create_model(f"{title}Options", __base__=Body, **fields)
    return _OPTIONS[key]


def parse_options(product: Product, given: dict[str, Any], where: str) -> dict[str, Any]:
    """`given` (the body's `where` object: "options", "parameters") validated as the product's options: the values
    given, not null (an absent option is the runner's default), or the 422 naming `where.<option>`."""
    holder = create_model("Given", __base__=Body, **{where: (options_type(product), ...)})
    return getattr(parse(holder, {where: given}), where).model_dump(exclude_unset=True)


def rows_request(product: Product) -> type[Body]:
    """POST /rows/NAME's body with the product's options typed (the OpenAPI document's)."""
    title = options_type(product).__name__.removesuffix("Options")
    return create_model(f"{title}RowsRequest", __base__=RowsRequest,
                        options=(options_type(product), Field(default_factory=options_type(product),
                                                              description="the product's per-call options")))


def task_request(product: Product, parameters: tuple[str, ...], base: type[Body] = TaskRequest) -> type[Body]:
    """An HF Inference task's body with its `parameters` typed by the product's options of those names."""
    typed = options_type(product, parameters)
    title = typed.__name__.removesuffix("Options")
    return create_model(f"{title}TaskRequest", __base__=base,
                        parameters=(typed, Field(default_factory=typed, description="the task's parameters")))


# -- errors ------------------------------------------------------------------------------------------------------

_TYPES = {"string": "a string", "bool": "a boolean", "int": "an integer", "float": "a number", "list": "a list",
          "dict": "an object", "model": "an object", "literal": "one of its values"}


def _shape(name: str) -> str:
    """An object type's fields, as an error says what it expects: {"question": str, "context": str}."""
    kind = globals().get(name)
    if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
        return "an object"
    said = {f: getattr(info.annotation, "__name__", "str") for f, info in kind.model_fields.items()}
    return "an object {" + ", ".join(f'"{f}": {t}' for f, t in said.items()) + "}"


def _where(loc: tuple, body: Any, is_missing: bool) -> tuple[str, Any]:
    """(the field's path in the body, as a 422 names it, "pairs[0].claim"; the object holding it). pydantic's loc
    also names union members (Tag) and validators; those parts are not in the body, and are left out."""
    path, value, parent = "", body, body
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            path, parent, value = f"{path}[{part}]", value, value[part]
        elif isinstance(part, str) and isinstance(value, dict) and (part in value or (last and is_missing)):
            path, parent, value = f"{path}.{part}" if path else part, value, value.get(part)
    return path, parent


def problem(error: dict, body: Any) -> ServiceError:
    """One pydantic error (ValidationError.errors()[0]) of `body` as the 422 the service says it with."""
    kind, given = error["type"], error.get("input")
    name, parent = _where(error["loc"], body, kind == "missing")
    if kind == "missing":
        return missing(name, parent if isinstance(parent, dict) else {})
    if kind.endswith("_type") or kind == "model_attributes_type":
        expected = error["msg"] if kind == "texts_type" else _shape(error["ctx"]["class_name"]) \
            if kind == "model_type" else _TYPES.get(kind.removesuffix("_type"), "a value")
        if given is None:
            return bad_request(f"`{name}` is null, not {expected}")
        return bad_request(f"`{name}` must be {expected}, got {type(given).__name__}")
    if kind in ("text", "token_ids", "refused"):  # the custom errors above, each saying what is wrong
        return bad_request(f"`{name}` {error['msg']}")
    if kind == "extra_forbidden":  # named by the object holding it
        holder, _, key = name.rpartition(".")
        return bad_request(f"`{holder}` has unknown key(s) {[key]}")
    if kind == "literal_error":  # one of an option's choices
        return bad_request(f"`{name}` must be one of {error['ctx']['expected']}, got {given!r}"[:300])
    said = error["msg"].removeprefix("Input ")
    return bad_request(f"`{name}` {said[:1].lower()}{said[1:]}, got {given!r}"[:300])


def parse(kind: type[Body], body: dict) -> Any:
    """`body` validated as `kind`, or the 422 naming its first problem's field."""
    try:
        return kind.model_validate(body)
    except ValidationError as e:
        raise problem(e.errors(include_url=False)[0], body) from None
