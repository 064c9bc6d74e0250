"""A model's chat template: messages rendered to text as transformers' apply_chat_template renders them, tokenized
without special tokens, cut to the window as sentence-transformers cuts a chat-rendered row (its template's tail
written back over the row's last tokens). sentence-transformers' CrossEncoder over a causal language model (a
LogitScore reranker: Qwen3-Reranker, mxbai-rerank-v2) reads each (query, document) pair this way.

    chat = ChatTemplate.from_dir(directory, special_tokens=tokenizer.special_tokens)
    chat.render(chat.pair("query", "document"))                  # the text the model reads
    chat.encode(tokenizer, [chat.pair(q, d) for ...], max_length)  # Encoded: ids and the tokens each lost

Rendering (transformers utils/chat_template_utils.py _cached_compile_jinja_template, render_jinja_template): Jinja's
sandbox with trim_blocks and lstrip_blocks, loop controls, transformers' tojson / raise_exception / strftime_now /
namespace, the `{% generation %}` tag rendering its body; the template sees `messages`, `add_generation_prompt`
(False unless the model's processing kwargs say otherwise), `tools` / `documents` None and the tokenizer's named
special tokens (tokenization_utils_base.py apply_chat_template: special_tokens_map under the keyword arguments).
jinja2 comes with torch (one of its requirements): no dependency of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from minialign.text.tokenizer import Encoded, Tokenizer

PAIR_ROLES = ("query", "document")  # sentence-transformers base/modality.py PAIR_ROLES: a pair's two messages
MESSAGE_FORMATS = ("flat", "structured")  # content a string, or [{"type": "text", "text": ...}]
# sentence-transformers InputFormatter._infer_format ("auto", its default): a template reading any of these expects
# structured content; else flat
STRUCTURED_PATTERNS = ("content[0]", ".type", "'type'", '"type"', "item.type", "message.content[")
# apply_chat_template's size keywords (transformers' _APPLY_CHAT_TEMPLATE_TOP_LEVEL_KWARGS): tokenization's, never
# the template's variables
SIZE_KEYWORDS = ("padding", "truncation", "max_length", "return_tensors")
# sentence-transformers Transformer._chat_template_suffix_ids: the template's tail is the common token suffix of two
# renders whose contents are these fillers (their tokens differ, so the common part is template, never content)
FILLERS = ("0", "1 2 3 4")
SUFFIXES = 128  # the templates' tails kept (one per system prompt and message layout)
TEMPLATE_FILE = "chat_template.jinja"  # transformers 4.43+ saves the template beside tokenizer_config.json


def read_chat_template(directory: str | Path) -> str | None:
    """The directory's chat template: chat_template.jinja, else tokenizer_config.json's "chat_template" (a string,
    or a list of {"name", "template"} of which "default" is used, as transformers' get_chat_template picks when no
    name is given); None when it has none."""
    directory = Path(directory)
    if (directory / TEMPLATE_FILE).is_file():
        return (directory / TEMPLATE_FILE).read_text(encoding="utf-8")
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return None
    template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        if "default" not in named:
            raise ValueError(f"{config}: chat_template holds templates {sorted(map(str, named))} and no 'default'")
        template = named["default"]
    if template is not None and not isinstance(template, str):
        raise ValueError(f"{config}: chat_template must be a string or a list of named templates, "
                         f"got {type(template).__name__}")
    return template


@lru_cache(maxsize=16)
def compile_template(source: str):
    """The template compiled in transformers' environment (the module docstring)."""
    try:
        import jinja2
        from jinja2.ext import Extension, loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # torch requires jinja2, so this is a broken install
        raise ImportError("a chat template needs jinja2 (installed with torch); reinstall it: pip install jinja2") from e

    class Generation(Extension):
        """transformers' AssistantTracker tag: `{% generation %}...{% endgeneration %}` renders its body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' filter: Jinja's own escapes HTML characters
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       namespace=jinja2.utils.Namespace, dict=dict)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"chat template, line {e.lineno}: {e.message}") from None


def infer_format(template: str) -> str:
    """sentence-transformers' message format for "auto" (InputFormatter._infer_format, for a model type it does not
    list): structured where the template reads content as a list of typed parts, else flat."""
    return "structured" if any(pattern in template for pattern in STRUCTURED_PATTERNS) else "flat"


class ChatTemplate:
    def __init__(self, template: str, *, special_tokens: dict[str, str] | None = None,
                 message_format: str = "auto", keywords: dict[str, Any] | None = None, restore_suffix: bool = True,
                 truncation_side: str = "right"):
        """template: Jinja source; special_tokens: the tokenizer's named ones (bos_token, eos_token, ...);
        message_format: how a message's content is written (sentence-transformers' modality_config "message"
        "format"); keywords: the model's chat-template keyword arguments (add_generation_prompt, ...);
        restore_suffix: whether a cut row gets the template's tail back (sentence-transformers' flag, default on);
        truncation_side: which end a row past the window loses (the tokenizer's, tokenizer_config.json)."""
        if truncation_side not in ("right", "left"):
            raise ValueError(f"truncation_side must be 'right' or 'left', got {truncation_side!r}")
        self.truncation_side = truncation_side
        if message_format == "auto":
            message_format = infer_format(template)
        if message_format not in MESSAGE_FORMATS:
            raise ValueError(f"message format must be one of {MESSAGE_FORMATS} or 'auto', got {message_format!r}")
        keywords = {k: v for k, v in (keywords or {}).items() if k not in SIZE_KEYWORDS}
        if clash := sorted({"messages", "tools", "documents"} & set(keywords)):
            raise ValueError(f"chat-template keywords {clash} name what the template is given itself")
        self.template = compile_template(template)
        self.source, self.message_format, self.restore_suffix = template, message_format, restore_suffix
        self.variables = {**(special_tokens or {}), "add_generation_prompt": False, **(keywords or {})}
        self._suffixes: dict[str, list[int]] = {}  # by skeleton: a prompt's text is part of it (SUFFIXES at most)

    @classmethod
    def from_dir(cls, directory: str | Path, **options) -> ChatTemplate | None:
        """The directory's template (read_chat_template), None when it has none."""
        template = read_chat_template(directory)
        return None if template is None else cls(template, **options)

    def message(self, role: str, content: str) -> dict[str, Any]:
        if self.message_format == "flat":
            return {"role": role, "content": content}
        return {"role": role, "content": [{"type": "text", "text": content}]}

    def pair(self, query: str, document: str | None = None, *, prompt: str | None = None) -> list[dict[str, Any]]:
        """A (query, document) pair's messages (sentence-transformers InputFormatter.pair_to_messages); one text
        alone is a "user" message (to_message); a prompt a system message before them (prepend_prompt_to_messages)."""
        messages = [self.message("system", prompt)] if prompt is not None else []
        if document is None:
            return messages + [self.message("user", query)]
        return messages + [self.message(role, text) for role, text in zip(PAIR_ROLES, (query, document))]

    def render(self, messages: list[dict[str, Any]]) -> str:
        try:
            return self.template.render(messages=messages, tools=None, documents=None, **self.variables)
        except Exception as e:  # the template's own raise_exception, or a template error on these messages
            raise ValueError(f"chat template: {type(e).__name__}: {e}") from None

    def check_pairs(self) -> None:
        """sentence-transformers' pair-role probe (InputFormatter.pair_roles_failure): each role's content must reach
        the rendered prompt, else a ValueError naming the role left out."""
        base, *varied = [self.render(self.pair(q, d)) for q, d in (("alpha", "bravo"), ("charlie", "bravo"),
                                                                   ("alpha", "foxtrot"))]
        if dropped := [role for role, text in zip(PAIR_ROLES, varied) if text == base]:
            raise ValueError(f"the chat template cannot carry a (query, document) pair: the "
                             f"{' and '.join(map(repr, dropped))} content does not reach the rendered prompt")

    def suffix(self, tokenizer: Tokenizer, messages: list[dict[str, Any]]) -> list[int]:
        """The template's tail after the last content, as token ids (sentence-transformers
        Transformer._chat_template_suffix_ids): system messages kept, every other content replaced by each filler,
        the longest common token suffix of the two renders; [] where the renders never differ."""
        skeletons = [[m if m["role"] == "system" else self.message(m["role"], filler) for m in messages]
                     for filler in FILLERS]
        key = repr(skeletons[0])
        if key not in self._suffixes:
            if len(self._suffixes) >= SUFFIXES:  # sentence-transformers' cap on its cache
                self._suffixes.pop(next(iter(self._suffixes)))
            first, second = (tokenizer.backend.encode(self.render(s), add_special_tokens=False).ids for s in skeletons)
            count = 0
            for a, b in zip(reversed(first), reversed(second)):
                if a != b:
                    break
                count += 1
            self._suffixes[key] = first[len(first) - count:] if 0 < count < min(len(first), len(second)) else []
        return self._suffixes[key]

    def encode(self, tokenizer: Tokenizer, conversations: Sequence[list[dict[str, Any]]], max_length: int) -> Encoded:
        """Each conversation rendered and tokenized without special tokens (apply_chat_template tokenizes with
        add_special_tokens=False), its end cut to max_length and, where cut, the template's tail written over its
        last tokens (sentence-transformers Transformer._restore_chat_template_suffix), so the model still reads the
        prompt's end; Encoded.truncated counts the tokens each lost."""
        rendered = [self.render(messages) for messages in conversations]
        out = Encoded([], [], [])
        for messages, encoding in zip(conversations, tokenizer.backend.encode_batch(rendered, add_special_tokens=False)):
            ids = encoding.ids[:max_length] if self.truncation_side == "right" else encoding.ids[-max_length:]
            if self.restore_suffix and len(encoding.ids) >= max_length and (tail := self.suffix(tokenizer, messages)):
                keep = min(len(tail), len(ids))
                ids[len(ids) - keep:] = tail[-keep:]
            out.ids.append(ids)
            out.type_ids.append([0] * len(ids))
            out.truncated.append(max(len(encoding.ids) - max_length, 0))
        return out
