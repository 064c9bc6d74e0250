"""minialign's own route for every product of the table (apps/products.py): the file face over HTTP.

    POST /rows/KIND   {"rows": [{ROLE: str, "id"?: any, ...}], "options": {OPTION: value}, "id_field"?: str}
                      -> {"results": [record, ...]}

KIND is a loaded model's name in /info's "models" (embed, classify, minicheck, alignscore_base, a product's
name); a row holds the product's inputs by role (score: context and claim; embed: text; classify: text and an
optional pair), checked as a file's rows are (files/rows.record_values: the same messages); options are the
product's per-call options (normalize, prompt_name, activation, ...); each record is what the file command
writes for that row: a row's id (its `id`, or the field `id_field` names, as the file commands' --id-field) comes
back first in its record, and a second row with the same id is refused, as files/rows.read_rows refuses it (a row
without an id, or with a null one, has none in its record: the results are in the rows' order). Requests with the
same options share model calls. HF Inference's tasks of the table's products (hf_inference.py) run the same jobs
(`job_for`, their options named `parameters.<option>`), so their requests share model calls with these.
"""

from __future__ import annotations

import json
from typing import Any

from minialign.apps.files.rows import Row, id_problem, record_values
from minialign.apps.products import PRODUCTS, Product
import minialign.apps.serve.bodies as bodies
from minialign.apps.serve.bodies import parse
from minialign.apps.serve.core import Core, Models, Route, ServiceError, bad_request
from minialign.products.runner import OptionError


def job_for(service: Core, kind: str, product: Product, given: dict[str, Any], *, where: str = "options"):
    """The product's job for a request's options (`where`: the body's object holding them, as errors name it),
    made once per distinct options (requests that share it share model calls)."""
    offered = {o.name: o for o in product.options}
    if unknown := sorted(set(given) - set(offered)):
        raise bad_request(f"`{where}` {unknown} are not options of {product.name}; its options: {sorted(offered)}")
    options = bodies.parse_options(product, given, where)
    key = (kind, json.dumps(options, sort_keys=True))
    if key not in service.jobs:
        _, runner = service.models.loaded()[kind]
        try:
            service.jobs[key] = product.make_job(runner, model=service.models.names.get(kind), **options)
        except OptionError as e:  # a value the runner refuses, naming its option
            raise bad_request(f"`{where}.{e.option}` {e.problem}") from None
        except ValueError as e:  # an option the runner refuses (an unknown prompt name)
            raise ServiceError(422, "Validation", f"`{where}`: {e}") from None
    return service.jobs[key]


async def rows(service: Core, kind: str, body: dict) -> dict:
    product = PRODUCTS[service.models.loaded()[kind][0]]
    request = parse(bodies.RowsRequest, body)
    job = job_for(service, kind, product, request.options)
    given, id_field = request.rows, request.id_field
    service.check_batch(len(given), "rows")
    parsed, first = [], {}
    for i, record in enumerate(given):
        values, problems = record_values(record, job)
        if problems:
            raise bad_request(f"`rows[{i}]`: " + "; ".join(problems))
        row_id = record.get(id_field)
        if problem := id_problem(row_id, id_field):  # as a file's row: an id its answer could not write
            raise bad_request(f"`rows[{i}]`: {problem}")
        if row_id is not None and str(row_id) in first:  # ids compared as text, as the file commands do
            raise bad_request(f"`rows[{i}]`: id {row_id!r} is also the id of rows[{first[str(row_id)]}] (an id "
                              "names one row of the results)")
        if row_id is not None:
            first[str(row_id)] = i
        parsed.append(Row(row_id, i, values))
    records = await service.run(kind, "rows", [(job, row) for row in parsed], key=id(job))
    # the file command's line, {"id": row.id, **record} (files/writer.ResultWriter), where the row has an id
    return {"results": [record if row.id is None else {"id": row.id, **record}
                        for row, record in zip(parsed, records)]}


def routes(models: Models) -> list[Route]:
    """POST /rows/KIND for each loaded model."""
    return [Route(f"/rows/{kind}", lambda service, body, k=kind: rows(service, k, body),
                  lambda m, k=kind: [k] if k in m.loaded() else [], body=bodies.rows_request(PRODUCTS[product]),
                  answer=bodies.RowsResponse)
            for kind, (product, _) in models.loaded().items()]
