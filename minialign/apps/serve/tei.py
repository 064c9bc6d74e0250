"""text-embeddings-inference's API (TEI: router/src/http/server.rs and types.rs), for the embedder, the classifier
or reranker, the sparse (SPLADE) encoder and the multi-vector (ColBERT) encoder.

    POST /embed        {"inputs": str | [str], "normalize", "truncate", "prompt_name", "dimensions"} -> [[float]]
                       (dimensions: the first ones kept, before normalize: a Matryoshka model's shorter embedding)
    POST /similarity   {"inputs": {"source_sentence", "sentences"}, "parameters": {"truncate", "prompt_name"}}
                       -> [cosine]  (huggingface_hub's sentence_similarity posts this too)
    POST /predict      {"inputs": text | [a, b] | [[a], [b, c]], "raw_scores", "truncate"} -> [{"label", "score"}]
    POST /rerank       {"query", "texts", "raw_scores", "return_text", "truncate"} -> [{"index", "score", "text"?}]
    POST /embed_sparse {"inputs": str | [str], "truncate", "prompt_name"} -> [[{"index": int, "value": float}]]
                       per input its non-zero values, ascending index (server.rs embed_sparse: sparsify), from the
                       SparseEncoder (--sparse)
    POST /embed_all    {"inputs": str | [str], "truncate", "prompt_name"} -> [[[float]]]: per input its token
                       vectors (TEI: the model's raw token embeddings), from the MultiVectorEncoder (--multivector):
                       each kept token's vector after its Dense, skiplist and Normalize modules, as
                       MultiVectorEncoder.encode gives them; or from the embedder (--embed): its final hidden states,
                       every token within the window (special tokens included), as SentenceEncoder.encode(...,
                       output_value="token_embeddings") and sentence-transformers give them. With both loaded, the
                       body's `model` chooses ("multivector" or "embed", or a name the model is served by:
                       serve/names.py; another name: 404 listing them), and without one the multi-vector model serves
                       (GET /info lists /embed_all under both); with one loaded, `model` is not read (as TEI, which
                       serves one model)
                       Both take minialign's extra `task` ("query" | "document": encode_query / encode_document's
                       prompt, window and route; absent: encode's) and TEI's `truncation_direction` "right" (the only
                       one served: "left" is refused, 422)
    POST /tokenize     {"inputs": str | [str], "add_special_tokens": true, "prompt_name"} -> per input its tokens
                       [{"id", "text", "special", "start", "stop"}] (character offsets); POST /decode {"ids": [int] |
                       [[int]], "skip_special_tokens": true} -> [str]; both by the TEI model's tokenizer (the embedder,
                       else the classifier, the sparse or the multi-vector encoder), or the one the body's `model` names
    POST /             routed by the body (TEI routes it by the one model it serves): root

Each route is a function of (the service's Core, the body): serve/core.py.
"""

from __future__ import annotations

from typing import Any

import torch

import minialign.apps.serve.hf_inference as hf_inference
import minialign.apps.serve.bodies as bodies
from minialign.apps.serve.bodies import parse
from minialign.apps.serve.core import Core, Models, Route, ServiceError, bad_request, dimensions, empty, prompt_text
from minialign.products.runner import inputs_of


def _predict_inputs(value: str | list) -> tuple[list[tuple[str, str | None]], bool]:
    """TEI's PredictInput, validated (bodies.PredictInput): a text, a pair [a, b], or a batch of either ([[a],
    [b, c]]); (items, batched)."""
    def sequence(v: str | list[str]) -> tuple[str, str | None]:
        return (v, None) if isinstance(v, str) else (v[0], v[1] if len(v) == 2 else None)

    if bodies.predict_form(value) == "batch":  # [] too: an empty batch
        return [sequence(v) for v in value], True
    return [sequence(value)], False


def _token_request(service: Core, kind: str, request: bodies.TokensRequest):
    """/embed_sparse's and /embed_all's common body: (runner, texts, (prompt text, task)), each input checked
    against the window the call uses unless `truncate`."""
    runner = service.require(kind)
    given, task, name = request.inputs, request.task, request.prompt_name
    service.check_batch(len(given))
    if kind == "embed":  # a task names the prompt the embedder's encode_query / encode_document would use
        prompt = prompt_text(runner, runner.task_prompt_name(task) if task is not None and name is None else name)
    else:
        prompt = prompt_text(runner, name, task=task)
    window = {"task": task} if kind == "multivector" else {}
    if not request.truncate and (long := runner.over_window(given, prompt=prompt, **window)):
        limit = runner.window(task) if kind == "multivector" else runner.max_length
        raise ServiceError(413, "Validation", f"Input validation error: `inputs` must have less than {limit} "
                                              f"tokens. Given: {long[0][1]}")
    return runner, given, (prompt, task)


async def embed_sparse(service: Core, body: dict) -> list:
    """TEI's /embed_sparse (server.rs embed_sparse): per input its non-zero values as {"index", "value"}, ascending
    index (the SparseEncoder's rows, products/sparse.py)."""
    _, given, key = _token_request(service, "sparse", parse(bodies.TokensRequest, body))
    rows = await service.run("sparse", "sparse", given, key=key)
    return [[{"index": i, "value": v} for i, v in zip(indices, values)] for indices, values in rows]


EMBED_ALL = ("multivector", "embed")  # /embed_all's models, the first loaded serving a body that names none


def _embed_all_kind(service: Core, name: str | None) -> str:
    """The model a /embed_all body asks for (the module docstring), or TEI's 424 when neither is loaded."""
    loaded = [kind for kind in EMBED_ALL if kind in service.models.loaded()]
    if not loaded:
        raise ServiceError(424, "Backend", "Backend error: /embed_all needs a multi-vector or an embedding model "
                                           "(start with --multivector or --embed)")
    if len(loaded) == 1 or name is None:
        return loaded[0]
    names = {kind: [kind, *service.models.accepted(kind)] for kind in loaded}
    for kind in loaded:
        if name in names[kind]:
            return kind
    listed = "; ".join(f"{kind}: " + ", ".join(repr(n) for n in names[kind]) for kind in loaded)
    raise ServiceError(404, "NotFound", f"The model {name!r} is not loaded; /embed_all serves {listed}")


async def embed_all(service: Core, body: dict) -> list:
    """TEI's /embed_all (server.rs embed_all): per input its token vectors [[float]], the MultiVectorEncoder's or the
    embedder's token embeddings (the module docstring)."""
    request = parse(bodies.TokensRequest, body)
    kind = _embed_all_kind(service, request.model)
    _, given, key = _token_request(service, kind, request)
    if kind == "embed":
        vectors = await service.run("embed", "token_embeddings", given, key=key[0])
    else:
        vectors = await service.run("multivector", "token_vectors", given, key=key)
    return [v.tolist() for v in vectors]


async def embed(service: Core, body: dict) -> list:
    embedder = service.require("embed")
    request = parse(bodies.EmbedRequest, body)
    given = request.inputs
    service.check_batch(len(given))
    prompt = prompt_text(embedder, request.prompt_name)
    service.check_length(embedder, given, request.truncate, prompt=prompt)
    width = dimensions(request.dimensions, embedder.dimension)
    vectors = [v[:width] for v in await service.run("embed", "encode", given, key=prompt)]
    if request.normalize:
        vectors = [torch.nn.functional.normalize(v, dim=0) for v in vectors]
    return [v.tolist() for v in vectors]


async def predict(service: Core, body: dict) -> list:
    classifier = service.require("classify")
    request = parse(bodies.PredictRequest, body)
    items, batched = _predict_inputs(request.inputs)
    service.check_batch(len(items))
    service.check_length(classifier, inputs_of(*zip(*items)), request.truncate)
    logits = await service.run("classify", "logits", items)
    # TEI's scores: the raw logits, or sigmoid for one label and softmax for several
    activation = "none" if request.raw_scores else "sigmoid" if classifier.reranker else "softmax"
    ranked = classifier.label_ranking(classifier.activate(torch.stack(logits), activation))
    answers = [[{"label": label, "score": score} for label, score in row] for row in ranked]
    return answers if batched else answers[0]


async def rerank(service: Core, body: dict) -> list:
    request = parse(bodies.RerankRequest, body)
    query, documents = request.query, request.texts
    if not documents:
        raise empty("texts")
    classifier = service.require("classify")
    if not classifier.reranker:
        raise ServiceError(424, "Backend", "Backend error: model is not a re-ranker model")
    service.check_batch(len(documents), "texts")
    pairs = [(query, t) for t in documents]
    service.check_length(classifier, pairs, request.truncate)
    logits = await service.run("classify", "logits", pairs)
    scores = classifier.activate(torch.stack(logits), "none" if request.raw_scores else "sigmoid")
    return [{"index": i, "score": score, **({"text": documents[i]} if request.return_text else {})}
            for i, score in classifier.rank(scores.tolist())]


async def similarity(service: Core, body: dict) -> list:
    """TEI's /similarity, huggingface_hub's sentence_similarity: {"inputs": {"source_sentence",
    "sentences"}, "parameters": {"truncate", "prompt_name"}} -> the cosine similarity of each sentence to the source
    (router/src/http/server.rs, similarity: 1 - cosine distance of the unnormalized embeddings)."""
    embedder = service.require("embed")
    request = parse(bodies.SimilarityRequest, body)
    source, sentences, options = request.inputs.source_sentence, request.inputs.sentences, request.parameters
    if not sentences:
        raise empty("inputs.sentences")
    service.check_batch(len(sentences) + 1, "inputs.sentences")  # the source counts, as in TEI
    prompt = prompt_text(embedder, options.prompt_name, "parameters.prompt_name")
    service.check_length(embedder, [source, *sentences], options.truncate, prompt=prompt)
    vectors = torch.stack(await service.run("embed", "encode", [source, *sentences], key=prompt)).float()
    return torch.nn.functional.cosine_similarity(vectors[:1], vectors[1:]).tolist()


# /tokenize's and /decode's models, the first loaded by default
TOKENIZE = ("embed", "classify", "sparse", "multivector")


def _tokenizing(service: Core, name: str | None):
    """(kind, runner) whose tokenizer /tokenize or /decode uses: the body's `model` (a kind or a name the model is
    served by), else the first of TOKENIZE loaded (TEI serves one model)."""
    loaded = [kind for kind in TOKENIZE if kind in service.models.loaded()]
    if not loaded:
        raise ServiceError(424, "Backend", "Backend error: /tokenize and /decode need a TEI model (start with --embed, "
                                           "--classify, --sparse or --multivector)")
    if name is None:
        return loaded[0], service.models.loaded()[loaded[0]][1]
    for kind in loaded:
        if name == kind or name in service.models.accepted(kind):
            return kind, service.models.loaded()[kind][1]
    listed = "; ".join(f"{kind}: " + ", ".join(repr(n) for n in service.models.accepted(kind)) for kind in loaded)
    raise ServiceError(404, "NotFound", f"The model {name!r} is not loaded; /tokenize and /decode serve {listed}")


async def tokenize(service: Core, body: dict) -> list:
    """TEI's /tokenize (server.rs tokenize; types.rs TokenizeRequest, SimpleToken): {"inputs": str | [str],
    "add_special_tokens": true, "prompt_name"} -> per input its tokens [{"id", "text", "special", "start", "stop"}]:
    a special token's text is the token and its start / stop null; another's text is the input's characters from start
    to stop (character offsets; with a prompt, in the prompt followed by the input, as TEI). Not cut to the window."""
    request = parse(bodies.TokenizeRequest, body)
    kind, runner = _tokenizing(service, request.model)
    given = request.inputs
    service.check_batch(len(given))
    prompt = prompt_text(runner, request.prompt_name) if kind == "embed" else ""
    if kind != "embed" and request.prompt_name is not None:
        raise bad_request(f"`prompt_name`: the {kind} model takes no prompt here")
    encodings = runner.tokenizer.backend.encode_batch([prompt + t for t in given],
                                                      add_special_tokens=request.add_special_tokens)
    answers = []
    for read, encoding in zip((prompt + t for t in given), encodings):
        answers.append([{"id": i, "text": token, "special": True, "start": None, "stop": None} if special else
                        {"id": i, "text": read[start:stop], "special": False, "start": start, "stop": stop}
                        for i, token, special, (start, stop) in zip(encoding.ids, encoding.tokens,
                                                                    encoding.special_tokens_mask, encoding.offsets)])
    return answers


async def decode(service: Core, body: dict) -> list[str]:
    """TEI's /decode (server.rs decode; types.rs DecodeRequest): {"ids": [int] | [[int]], "skip_special_tokens":
    true} -> the text of each list of ids, by the tokenizer's decoder (no clean-up of spaces, as TEI)."""
    request = parse(bodies.DecodeRequest, body)
    _, runner = _tokenizing(service, request.model)
    batched = bodies.ids_form(request.ids) == "batch"
    lists = request.ids if batched else [request.ids]
    service.check_batch(len(lists), "ids")
    size = runner.tokenizer.backend.get_vocab_size(with_added_tokens=True)  # the model's: a check the type cannot make
    for i, one in enumerate(lists):
        for j, v in enumerate(one):
            if not 0 <= v < size:
                where = f"ids[{i}][{j}]" if batched else f"ids[{j}]"
                raise bad_request(f"`{where}` must be a token id from 0 to {size - 1}, got {v!r}")
    return [runner.tokenizer.decode(one, skip_special_tokens=request.skip_special_tokens,
                                    clean_up_tokenization_spaces=False)
            for one in lists]


async def root(service: Core, body: dict) -> Any:
    """POST /. TEI routes it by the one model it serves (router/src/http/server.rs: an embedding model
    embeds, a classifier predicts, a reranker reranks); here several can be loaded, so the body decides,
    by the first rule that fits:
      1. a `query`                                  -> /rerank (TEI's rerank body)
      2. `inputs` an object with `text`             -> HF Inference's text-classification of a (text, text_pair):
                                                       MiniCheck if loaded, else the classifier (hf_inference.py)
      3. an HF Inference task's body (`inputs` a string: text-classification with a classifier loaded,
         token-classification with --ner, fill-mask with --fill-mask, zero-shot-classification with
         --zero-shot; hf_inference.HF_TASKS) with `parameters`, or without them where neither
         an embedding model nor a classifier is loaded; `inputs` an object with `question` / `context`:
         question-answering with --qa, with or without `parameters`
                                                    -> that task; of several loaded, the one whose parameters
                                                       hold every key of the body's (hf_inference.hf_task:
                                                       InferenceClient sends the ones given), else a 422
                                                       naming each task's POST /pipeline/TASK
      4. `inputs` another object (source_sentence)  -> /similarity (huggingface_hub's sentence_similarity)
      5. any other `inputs`                         -> /embed if an embedding model is loaded (feature_extraction,
                                                       LangChain), else /predict
    With both models loaded, rule 5 refuses `inputs` holding a list (a pair or a batch of pairs, or
    ["a", "b"] meant as one pair): /predict and /embed read those differently, so the client names one."""
    inputs, models = body.get("inputs"), service.models
    if "query" in body:
        return await rerank(service, body)
    if isinstance(inputs, dict) and "text" in inputs and (models.minicheck or models.classifier) is not None:
        model = "minicheck" if models.minicheck else "classify"
        return await hf_inference.text_classification(service, body, model=model)
    if (chosen := hf_inference.hf_task(service, body)) is not None:
        task, kind = chosen
        return await task.handler(service, kind, body)
    if isinstance(inputs, dict):
        return await similarity(service, body)
    if models.embedder is not None:
        if models.classifier is not None and isinstance(inputs, list) and any(isinstance(v, list) for v in inputs):
            raise bad_request("POST / sends `inputs` to the embedding model when a classifier is loaded too, and "
                              "the embedding model takes no pairs: post pairs to /predict (texts to /embed)")
        return await embed(service, body)
    if models.classifier is not None:
        return await predict(service, body)
    raise ServiceError(424, "Backend", "Backend error: no TEI model is loaded (start with --embed or --classify; "
                                       "GET / lists the routes served)")


def _kind(name: str, attribute: str):
    return lambda m: [name] if getattr(m, attribute) is not None else []


def routes(models: Models) -> list[Route]:
    """TEI's routes, mounted whatever is loaded (without their model: TEI's 424 Backend); POST / serves the
    embedder, the classifier, MiniCheck and the HF Inference tasks of the table's products (rules above)."""
    embedder, classifier, minicheck = _kind("embed", "embedder"), _kind("classify", "classifier"), \
        _kind("minicheck", "minicheck")
    tasks = (lambda m: [kind for name, kind in hf_inference.task_kinds(m).items() if name != "text-classification"])
    reranker = (lambda m: classifier(m) if m.classifier is not None and m.classifier.reranker else [])
    return [Route("/embed", embed, embedder, always=True, body=bodies.EmbedRequest, answer=list[list[float]]),
            Route("/embed_sparse", embed_sparse, _kind("sparse", "sparse"), always=True, body=bodies.TokensRequest,
                  answer=list[list[bodies.SparseValue]]),
            Route("/embed_all", embed_all, lambda m: [kind for kind in EMBED_ALL if kind in m.loaded()], always=True,
                  body=bodies.TokensRequest, answer=list[list[list[float]]]),
            Route("/similarity", similarity, embedder, always=True, body=bodies.SimilarityRequest,
                  answer=list[float]),
            Route("/predict", predict, classifier, always=True, body=bodies.PredictRequest,
                  answer=list[bodies.Label] | list[list[bodies.Label]]),
            Route("/rerank", rerank, reranker, always=True, body=bodies.RerankRequest, answer=list[bodies.Ranked]),
            Route("/tokenize", tokenize, lambda m: [k for k in TOKENIZE if k in m.loaded()][:1], always=True,
                  body=bodies.TokenizeRequest, answer=list[list[bodies.Token]]),
            Route("/decode", decode, lambda m: [k for k in TOKENIZE if k in m.loaded()][:1], always=True,
                  body=bodies.DecodeRequest, answer=list[str]),
            Route("/", root, lambda m: embedder(m) + classifier(m) + minicheck(m) + tasks(m), always=True,
                  body=bodies.RootRequest, answer=Any)]
