"""`minialign serve`: its flags (one per product of the table, --NAME SRC, beside the service's limits) and its
wiring: bind the address, load each model where the service's protocols find it (serve/core.Models), serve."""

from __future__ import annotations

import argparse
import sys

from minialign.apps import extra_hint
from minialign.apps.commands import ADAPTER_HELP, DTYPES, INTERRUPTED, THREADS_HELP, dtype_choice
from minialign.nn.choices import PRECISION_DTYPES


class _ProductSpec(argparse.Action):
    """--NAME SRC of `serve`: collected into args.products (name -> the sources given, in order); only AlignScore
    takes several (one per NeMo Guardrails route name)."""

    def __init__(self, *args, repeatable: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.repeatable = repeatable

    def __call__(self, parser, namespace, values, option_string=None):
        products = dict(getattr(namespace, "products", None) or {})
        name = self.dest
        if products.get(name) and not self.repeatable:
            raise argparse.ArgumentError(self, "given twice: the service runs one model of it")
        products[name] = [*products.get(name, []), values]
        namespace.products = products
        namespace.loads = [*(getattr(namespace, "loads", None) or []), (name, values)]  # in the flags' order


def serve_parser(sub) -> None:
    from minialign.apps.products import PRODUCTS

    p = sub.add_parser("serve", help="an HTTP service: NeMo Guardrails' AlignScore API, TEI's API, HF Inference's "
                                     "text-classification, /score, /rows (needs the serve extra)")
    for product in PRODUCTS.values():  # --alignscore [NAME=]SRC (repeatable), --minicheck [SRC], --embed SRC, ...
        named = product.serve_as == "alignscore"
        optional = product.model is not None and not named
        p.add_argument(f"--{product.name}", dest=product.name, action=_ProductSpec, help=product.serve_help,
                       nargs="?" if optional else None, const=product.model if optional else None,
                       metavar="[NAME=]SRC" if named else "SRC", repeatable=named)
    p.set_defaults(products={}, loads=[])
    p.add_argument("--served-model-name", action="append", default=None, metavar="NAME",
                   help="the name a request's `model` gives and answers carry (default: the model's own id where its "
                        "files name it, else SRC); repeat it for several models, in the order of their flags")
    p.add_argument("--backbone", help="for an AlignScore .ckpt: backbone dir or hub id")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")

    def port(value: str) -> int:
        if not value.isdigit() or int(value) > 65535:
            raise argparse.ArgumentTypeError(f"{value!r}: a port is a number from 0 to 65535 (0: any free port)")
        return int(value)

    p.add_argument("--port", type=port, default=8000, help="port (0: any free port, printed at start)")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="token budget of one model call")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a call waits to merge requests")
    p.add_argument("--max-queue", type=int, default=512, help="requests in flight per model before 429")
    p.add_argument("--max-body-bytes", type=int, default=2 * 2**20, help="larger request bodies get 413")
    p.add_argument("--max-client-batch-size", type=int, default=1024, help="inputs in one request")
    p.add_argument("--api-key", help="require Authorization: Bearer KEY on every route but /health")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", choices=(*DTYPES, *PRECISION_DTYPES),
                   help="as the file commands' --dtype; int8 for --embed and --classify only")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP + "; each loaded model's forwards use them")
    p.add_argument("--adapter", default=None, metavar="TASK", help=ADAPTER_HELP + "; every loaded model")
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Bind, load, then serve until SIGTERM or Ctrl-C. Ctrl-C (while loading too) ends with one line and status 130
    (INTERRUPTED: a script sees it stopped); an address refused is one line naming it and the flag to change (status
    2, main), said before any model loads."""
    import errno

    try:
        import pydantic  # noqa: F401  (the routes' bodies: serve/bodies.py)
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ValueError(f"minialign serve needs the serve extra, {extra_hint('serve')}") from None
    from minialign.apps.products import PRODUCTS
    from minialign.apps.serve import Limits, Models, Service, bind, serve
    from minialign.products.runner import refuse_int8

    wanted = [(PRODUCTS[name], spec) for name, spec in args.loads]
    served = args.served_model_name or [None] * len(wanted)
    if len(served) != len(wanted):
        raise ValueError(f"--served-model-name given {len(served)} times for {len(wanted)} models: give one per model "
                         "flag, in the order of the flags")
    if args.served_model_name and len(set(served)) != len(served):
        raise ValueError(f"--served-model-name: each model needs its own name, got {served}")
    for product, _ in wanted:  # refused before anything is announced or loaded
        if not product.int8:
            refuse_int8(args.dtype, f"{product.runner.__name__} (--{product.name})")
    hints = {errno.EADDRINUSE: "pick another with --port (0: any free port)",
             errno.EADDRNOTAVAIL: "--host must be an address of this machine (127.0.0.1; 0.0.0.0: all of them)",
             errno.EACCES: "ports below 1024 need privileges: pick another with --port"}
    try:
        try:  # bound before the models load: an address in use is said at once (serve/app.py bind names it)
            sock = bind(args.host, args.port)
        except OSError as e:
            if e.errno not in hints:
                raise
            raise ValueError(f"{e.strerror}; {hints[e.errno]}") from None
        with sock:
            models = Models()
            for (product, spec), name in zip(wanted, served):
                load_served(models, product, spec, args, served=name)
            limits = Limits(max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                            max_queue=args.max_queue, max_body_bytes=args.max_body_bytes,
                            max_client_batch_size=args.max_client_batch_size, api_key=args.api_key)
            serve(Service(models, limits), host=args.host, sock=sock)
    except KeyboardInterrupt:  # uvicorn stops gracefully on SIGINT (answers what it took), then raises it again
        print("\nminialign serve: stopped (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED
    return 0


def load_served(models, product, spec: str, args: argparse.Namespace, *, served: str | None = None) -> None:
    """Load one model the service was told to (--NAME SPEC) where its protocols find it (serve/core.Models), served
    as `served` (--served-model-name; None: the model's own id, serve/names.py)."""
    from minialign.apps.serve import ALIGNSCORE_ROUTES

    loading = {"device": args.device, "dtype": dtype_choice(args), "threads": args.threads, "adapter": args.adapter}
    if product.serve_as == "alignscore":  # NeMo Guardrails' route names: --alignscore [NAME=]SRC
        name, _, src = spec.rpartition("=")
        name = name or ("large" if src == "AlignScore-large" else "base")
        if name not in ALIGNSCORE_ROUTES:
            raise ValueError(f"--alignscore {spec}: the route name must be one of {ALIGNSCORE_ROUTES} (NAME=SRC)")
        if name in models.alignscore:
            raise ValueError(f"--alignscore: two models for /alignscore_{name}")
        models.alignscore[name] = product.load_runner(src, backbone=args.backbone, **loading)
        models.names["alignscore"] = src
        models.names[f"alignscore_{name}"] = src  # each route's own, for /info
        if served is not None:
            models.served[f"alignscore_{name}"] = served
        return
    runner = product.load_runner(spec, **loading)
    if product.serve_as is not None:
        setattr(models, product.serve_as, runner)
    else:
        models.products[product.name] = runner
    models.names[product.name] = spec
    if served is not None:
        models.served[product.name] = served
