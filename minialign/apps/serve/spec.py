"""GET /openapi.json: an OpenAPI 3.1 document of the routes a service serves, generated from the route table
(Route.body, Route.answer, Route.errors) and the bodies' types (serve/bodies.py). The docs page renders the document
of every route a service can serve (serve/api_page.py).

A service's document holds exactly the routes its loaded models answer (GET / lists the same), GET /openapi.json
included; TEI's routes that answer 424 without their model are left out. Each operation has its request body (the
type's JSON schema, under components/schemas), its 200 answer and its protocol's error body (TEI's {"error",
"error_type"}, OpenAI's {"error": {...}}, Cohere's {"message"}) for 4XX and 5XX.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter

import minialign.apps.serve.bodies as bodies
import minialign.apps.serve.cohere as cohere
import minialign.apps.serve.openai as openai
from minialign.apps.serve.core import Core, Models, Route

REF = "#/components/schemas/{model}"
SUMMARY = 400  # characters of a handler's docstring an operation's summary keeps
# each protocol's error body (Route.errors; None: TEI's)
ERRORS = {None: bodies.TEIError, openai.error_body: bodies.OpenAIError, cohere.error_body: bodies.CohereError}


class _Schemas:
    """components/schemas, filled as each type's schema is asked for."""

    def __init__(self):
        self.components: dict[str, Any] = {}

    def of(self, kind: Any, mode: str) -> dict:
        """A type's schema, its models moved to components (a model itself: a $ref to it)."""
        schema = TypeAdapter(kind).json_schema(ref_template=REF, mode=mode)
        self.components.update(schema.pop("$defs", {}))
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            self.components[kind.__name__] = schema
            return {"$ref": REF.format(model=kind.__name__)}
        return schema


def _operation(route: Route, schemas: _Schemas) -> dict:
    doc = (route.handler.__doc__ or "").strip().split("\n\n")[0].split(":\n")[0]  # up to a list it introduces
    doc = " ".join(doc.split())[:SUMMARY]
    error = schemas.of(ERRORS.get(route.errors, bodies.TEIError), "serialization")
    operation: dict[str, Any] = {"operationId": f"{route.method.lower()}{route.path.replace('/', '_') or '_root'}"}
    if doc:
        operation["summary"] = doc
    if route.body is not None:
        operation["requestBody"] = {"required": True,
                                    "content": {"application/json": {"schema": schemas.of(route.body, "validation")}}}
    if route.answer is str:
        ok = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    else:
        answer = schemas.of(route.answer, "serialization") if route.answer is not None else {}
        ok = {"description": "OK", "content": {"application/json": {"schema": answer}}}
    operation["responses"] = {"200": ok,
                              "4XX": {"description": "a refused request, in the protocol's error shape",
                                      "content": {"application/json": {"schema": error}}},
                              "5XX": {"description": "the model failed, or the service is overloaded or stopping",
                                      "content": {"application/json": {"schema": error}}}}
    return operation


def document(routes: list[Route], title: str = "minialign service") -> dict:
    """The OpenAPI 3.1 document of `routes`."""
    schemas, paths = _Schemas(), {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, schemas)
    from minialign import __version__

    return {"openapi": "3.1.0", "info": {"title": title, "version": __version__},
            "paths": paths, "components": {"schemas": dict(sorted(schemas.components.items()))}}


async def openapi(service: Core, body: dict) -> dict:
    """The OpenAPI 3.1 document of the routes served, made on the first request (the loaded models do not change)."""
    if service.openapi is None:
        service.openapi = document([route for route in service.routes if route.serves(service.models)])
    return service.openapi


def routes(models: Models) -> list[Route]:
    """GET /openapi.json, whatever is loaded."""
    return [Route("/openapi.json", openapi, method="GET", answer=dict[str, Any])]
