"""Property-based fuzzing of the local API with schemathesis, against a running `hearth serve`.

Requests are generated from two OpenAPI documents: the one the server itself serves at
``/openapi.json``, and OpenAI's published spec (tests/data/openai/openapi.yaml) for the endpoints Hearth
implements. Each document is first narrowed to what docs/api.md says Hearth takes (the one model the
server has, text-only messages, the model's context and vocabulary, ``n`` up to the server's limit) and
to short generations, so that every generated request is one Hearth must accept. Every response is then
checked: never a 5xx, never a hang, a request the document allows is accepted (schemathesis's
``positive_data_acceptance``), every error has OpenAI's shape, every streamed chunk validates against
OpenAI's stream schema.

A third run, :func:`every_operation_spec`, covers every operation of ``/openapi.json`` (the Hub, download,
document, remote and admin routes among them) with the server-error check only: whatever a client sends,
the answer is never a 5xx. There the server's hub is the local stand-in (tests/hubserver.py), so nothing
reaches the internet, and the few fields that would act on the machine are pinned (the folders a document
collection reads, the address of a remote provider).

Used by tests/engine/server/test_fuzz.py (a bounded run) and benchmarks/fuzz.py (a long one).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# OpenAI's published spec (MIT, see tests/data/openai/LICENSE), kept in the repository's test data.
SPEC = Path(__file__).resolve().parents[2] / "data" / "openai" / "openapi.yaml"

# OpenAI's endpoints that Hearth implements, as (method, path) in each document.
OPENAI_OPERATIONS = (
    ("POST", "/chat/completions"),
    ("POST", "/completions"),
    ("POST", "/embeddings"),
    ("GET", "/models"),
    ("GET", "/models/{model}"),
)
APP_OPERATIONS = tuple((m, "/v1" + p.replace("{model}", "{model_id}")) for m, p in OPENAI_OPERATIONS) + (
    ("GET", "/health"),
    ("GET", "/metrics"),
)

# Short generations and small inputs keep a case to a fraction of a second on a CPU.
MAX_TOKENS = 3
MAX_N = 2
MAX_TEXT = 40
MAX_ITEMS = 3


def load_yaml(path: Path) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml reads the 3 MB spec ~7x faster
    return yaml.load(path.read_text(), Loader=loader)


def _nodes(node: Any) -> Iterable[dict]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _nodes(v)
    elif isinstance(node, list):
        for v in node:
            yield from _nodes(v)


def _types(node: dict) -> set[str]:
    t = node.get("type")  # a property named "type" is a schema, not a type
    return {x for x in t if isinstance(x, str)} if isinstance(t, list) else {t} if isinstance(t, str) else set()


def _request_schemas(doc: dict) -> list[dict]:
    """The component schemas that requests are generated from (responses keep theirs as they are)."""
    schemas = doc.get("components", {}).get("schemas", {})
    todo = [op.get("requestBody", {}) for item in doc["paths"].values() for op in item.values() if isinstance(op, dict)]
    todo += [item.get("parameters", []) for item in doc["paths"].values()]
    seen: dict[str, dict] = {}
    while todo:
        for node in _nodes(todo.pop()):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[1]
                if name not in seen:
                    seen[name] = schemas[name]
                    todo.append(schemas[name])
    return list(seen.values())


def _cap_sizes(doc: dict) -> None:
    """Bound every string and array of a request (a prompt must fit the model's context; a case must
    be quick)."""
    for node in _nodes([_request_schemas(doc), list(doc["paths"].values())]):
        types = _types(node)
        if "string" in types and "enum" not in node and node.get("minLength", 0) <= MAX_TEXT:
            node["maxLength"] = min(node.get("maxLength", MAX_TEXT), MAX_TEXT)
        if "array" in types and node.get("minItems", 0) <= MAX_ITEMS:
            node["maxItems"] = min(node.get("maxItems", MAX_ITEMS), MAX_ITEMS)


def _only(doc: dict, operations: Iterable[tuple[str, str]]) -> None:
    keep: dict[str, dict] = {}
    for method, path in operations:
        item = doc["paths"][path]
        keep.setdefault(path, {k: v for k, v in item.items() if k == "parameters"})[method.lower()] = item[method.lower()]
    doc["paths"] = keep
    doc.pop("security", None)  # the key is sent by the runner, not generated
    for item in keep.values():
        for op in item.values():
            if isinstance(op, dict):
                op.pop("security", None)


def _bounded_int(lo: int, hi: int, *, nullable: bool = True) -> dict:
    schema = {"type": "integer", "minimum": lo, "maximum": hi}
    return {"anyOf": [schema, {"type": "null"}]} if nullable else schema


def _token_bias() -> dict:
    # Token ids the starter model has (its vocabulary holds 49,152), biases in OpenAI's documented range.
    return {
        "anyOf": [
            {
                "type": "object",
                "propertyNames": {"pattern": "^[0-9]{1,4}$"},
                "additionalProperties": {"type": "integer", "minimum": -100, "maximum": 100},
                "maxProperties": 3,
            },
            {"type": "null"},
        ]
    }


def openai_spec_for_hearth(spec: dict, model: str, *, max_n: int = MAX_N) -> dict:
    """OpenAI's spec for the endpoints Hearth implements, narrowed as docs/api.md says."""
    doc = copy.deepcopy(spec)
    _only(doc, OPENAI_OPERATIONS)
    schemas = doc["components"]["schemas"]
    pinned = {"type": "string", "enum": [model]}

    chat = next(p for p in schemas["CreateChatCompletionRequest"]["allOf"] if "properties" in p)
    props = chat["properties"]
    props["model"] = pinned
    props["n"] = _bounded_int(1, max_n)
    props["logit_bias"] = _token_bias()
    props["max_tokens"] = _bounded_int(1, MAX_TOKENS)  # below 1 is refused
    # Always bounded: max_completion_tokens wins over max_tokens.
    props["max_completion_tokens"] = _bounded_int(1, MAX_TOKENS, nullable=False)
    chat["required"] = [*chat["required"], "max_completion_tokens"]
    # Refused (docs/tools.md): custom tools and calls of them; Hearth calls function tools. Not taken
    # yet: an `allowed_tools` tool choice. A forced call (`required`, a named function) needs the
    # request's tools to hold that function, which a schema cannot say: a 400 otherwise, as OpenAI's
    # (tests/engine/server/test_tool_calls.py forces calls); generated here: `auto` and `none`.
    props["tools"]["items"] = {"$ref": "#/components/schemas/ChatCompletionTool"}
    props["tool_choice"] = {"anyOf": [{"type": "string", "enum": ["auto", "none"]}, {"type": "null"}]}
    props["function_call"] = {"type": "string", "enum": ["auto", "none"]}  # the deprecated functions' tool_choice
    schemas["ChatCompletionMessageToolCalls"]["items"] = {"$ref": "#/components/schemas/ChatCompletionMessageToolCall"}
    # A function's parameters go into the prompt: a free-form object of a few short values, so that a case fits the
    # model's context (the spec's "any object" drew dozens of nested keys, a prompt of 2,000 tokens and its 400).
    schemas["FunctionParameters"] = {"type": "object", "maxProperties": MAX_ITEMS, "additionalProperties": {
        "type": ["string", "number", "boolean", "null"], "maxLength": MAX_TEXT}}  # fmt: skip
    # A function's name is "a-z, A-Z, 0-9, or underscores and dashes, at most 64" in the spec's own words.
    name = {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}
    schemas["FunctionObject"]["properties"]["name"] = name
    schemas["ChatCompletionFunctions"]["properties"]["name"] = name
    schemas["ChatCompletionMessageToolCall"]["properties"]["function"]["properties"]["name"] = name
    schemas["ChatCompletionNamedToolChoice"]["properties"]["function"]["properties"]["name"] = name
    # Not taken yet (engine.server.chat_tools knows none to high): reasoning_effort xhigh and max.
    for alt in schemas["ReasoningEffort"]["anyOf"]:
        if "enum" in alt:
            alt["enum"] = [e for e in alt["enum"] if e not in ("xhigh", "max")]
    # Refused, with a 400 that names the model: images, audio and files (the model reads text only).
    schemas["ChatCompletionRequestUserMessageContentPart"] = {
        "$ref": "#/components/schemas/ChatCompletionRequestMessageContentPartText"
    }

    comp = schemas["CreateCompletionRequest"]["properties"]
    comp["model"] = pinned
    comp["n"] = _bounded_int(1, max_n)
    comp["logit_bias"] = _token_bias()
    comp["max_tokens"] = _bounded_int(1, MAX_TOKENS, nullable=False)
    schemas["CreateCompletionRequest"]["required"] = ["model", "prompt", "max_tokens"]
    # Refused with a 400 that names the model: a suffix (the starter has no fill-in-the-middle markers; a code
    # model's are tested in test_infill.py).
    comp.pop("suffix", None)
    # Text prompts: token ids name the model's own vocabulary (tested apart, in test_prompt_logprobs.py). An empty
    # prompt (null is one) starts a document.
    text = {"type": "string", "minLength": 1}
    comp["prompt"] = {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}}]}

    emb = schemas["CreateEmbeddingRequest"]["properties"]
    emb["model"] = pinned
    # OpenAI's own text: an input "cannot be an empty string". Refused: token ids, and `dimensions`
    # outside 1 to the model's own size (tested apart).
    emb["input"] = {"oneOf": [text, {"type": "array", "minItems": 1, "maxItems": MAX_ITEMS, "items": text}]}
    emb.pop("dimensions")

    for param in doc["paths"]["/models/{model}"]["get"]["parameters"]:
        if param["name"] == "model":
            param["schema"] = pinned
    _cap_sizes(doc)
    return doc


STARTER_VOCAB = 49152  # SmolLM2's vocabulary


def app_spec_for_hearth(spec: dict, model: str, *, max_n: int = MAX_N) -> dict:
    """The server's own OpenAPI document for its OpenAI endpoints, narrowed the same way."""
    doc = copy.deepcopy(spec)
    _only(doc, APP_OPERATIONS)
    schemas = doc["components"]["schemas"]
    pinned = {"type": "string", "enum": [model]}
    for name in ("ChatCompletionBody", "CompletionBody", "EmbeddingBody"):
        props = schemas[name]["properties"]
        props["model"] = pinned
        if "n" in props:
            props["n"] = _bounded_int(1, max_n)
            props["logit_bias"] = _token_bias()
        # The tool and thinking fields are documented loosely here (engine.tools checks them, naming
        # the bad tool); they are fuzzed through OpenAI's spec, which says what they take.
        # `dimensions` is refused outside 1 to the model's own size (its vectors' size: tested apart), and
        # `continue_final_message` where the last message is not the assistant's (tests/engine/tools/test_render.py).
        for key in ("tools", "tool_choice", "functions", "function_call", "reasoning_effort", "chat_template_kwargs",
                    "dimensions", "continue_final_message"):
            props.pop(key, None)
        if "min_tokens" in props:  # above max_tokens it is a 400 naming it (tests/engine/server/test_llama_completion.py)
            props["min_tokens"] = _bounded_int(0, 1)
    chat = schemas["ChatCompletionBody"]
    chat["properties"]["max_tokens"] = _bounded_int(1, MAX_TOKENS)
    chat["properties"]["max_completion_tokens"] = _bounded_int(1, MAX_TOKENS, nullable=False)
    chat["required"] = [*chat["required"], "max_completion_tokens"]
    schemas["ChatMessageBody"]["properties"].pop("tool_calls", None)
    comp = schemas["CompletionBody"]
    comp["properties"]["max_tokens"] = _bounded_int(1, MAX_TOKENS, nullable=False)
    # token ids: the starter's own (an id past its vocabulary is a 400 that names it, tested apart)
    ids = {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "integer", "minimum": 0, "maximum": STARTER_VOCAB - 1}}
    comp["properties"]["prompt"] = {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}},
                                              ids, {"type": "array", "minItems": 1, "maxItems": 4, "items": ids}]}  # fmt: skip
    comp["required"] = [*comp["required"], "max_tokens"]
    comp["properties"].pop("suffix")  # refused on the starter, which has no fill-in-the-middle markers (test_infill.py)
    for param in doc["paths"]["/v1/models/{model_id}"]["get"]["parameters"]:
        if param["name"] == "model_id":
            param["schema"] = pinned
    _cap_sizes(doc)
    return doc


# The one repo of the hub stand-in a fuzzed server talks to (a real, tiny GGUF).
HUB_REPO = "FuzzOrg/Tiny-GGUF"
REMOTE_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, a refusal comes at once


def hub_stand_in(folder: Path):
    """The hub stand-in (not started) with :data:`HUB_REPO`, its file made in ``folder``."""
    import gguf
    import numpy as np

    from tests.hubserver import FakeHub, HubFile, HubRepo

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.Q4_K_M.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(8)
    w.add_head_count(1)
    w.add_tensor("token_embd.weight", np.zeros(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    files = [HubFile("README.md", b"# tiny\n", lfs=False), HubFile(path.name, path.read_bytes())]
    return FakeHub([HubRepo(HUB_REPO, files, tags=["gguf", "llama"])])


def every_operation_env(home: Path, hub_url: str) -> dict[str, str]:
    """The environment of a server fuzzed on every operation: its own data folder, the hub stand-in."""
    return {"HEARTH_HOME": str(home), "HF_ENDPOINT": hub_url, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": ""}


# Fields that make a model generate, bounded (a case must stay quick) wherever they appear.
_GENERATION_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict", "n_predict")
# Of them, those required: llama-server's (its absence means "until the context ends"), and Responses' (a background
# response goes on generating after its request is answered, beside the cases that follow).
_UNBOUNDED_WHEN_LEFT_OUT = ("n_predict", "max_output_tokens")


def _schema_with(doc: dict, ref_or_schema: dict) -> dict:
    ref = ref_or_schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        return doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return ref_or_schema


def _body_schema(doc: dict, method: str, path: str) -> dict | None:
    op = doc["paths"].get(path, {}).get(method)
    if not op:
        return None
    content = op.get("requestBody", {}).get("content", {})
    media = content.get("application/json") or next(iter(content.values()), None)
    return _schema_with(doc, media["schema"]) if media and "schema" in media else None


# Ollama's keep_alive in every form Ollama takes (seconds as a number or a string, Go durations, negative for
# ever, 0), numbers too large for a date among them (1e308 made /api/ps a 500 for every client).
KEEP_ALIVE = {
    "anyOf": [
        {"type": "null"},
        {"type": "number"},
        {"type": "integer"},
        {"enum": [0, -1, 9_999_999_999_999, 1e20, 1e308, -1e308, "0", "-1", "5m", "1h30m", "-1m", ".5h", "+5m", "1e308"]},
        {"type": "string", "pattern": "^[-+]?([0-9]{1,4}(\\.[0-9]{0,2})?(ns|us|ms|s|m|h)){1,3}$"},
    ]
}
# chat_template_kwargs naming what Hearth renders the template with (a 500 for messages, once), and others;
# never null here, so that the few cases of an operation try them.
TEMPLATE_KWARGS = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": 3,
    "propertyNames": {"enum": [
        "messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "raise_exception", "strftime_now",
        "range", "namespace", "enable_thinking", "reasoning_effort", "documents", "custom",
    ]},  # fmt: skip
}
# Paths no file can have: a name longer than NAME_MAX, a path longer than PATH_MAX (ENAMETOOLONG was a 500).
ODD_PATHS = [
    {"type": "string", "minLength": 256, "pattern": "^[a-z]{256,300}$"},
    {"type": "string", "minLength": 4020, "pattern": "^/hearth-fuzz-nowhere(/[a-z]{200,210}){20,22}$"},
]


def _or_odd_path(schema: dict) -> dict:
    return {"anyOf": [schema, *ODD_PATHS]}


def every_operation_spec(spec: dict, *, docs_folder: str, remote_url: str, hub_repo: str) -> dict:
    """The server's own document, every operation of it, for the server-error check.

    Args:
        docs_folder: The one folder a document collection may read (a fuzzed path could be ``/``).
        remote_url: The one address a remote provider may have (nothing may be asked of the network).
        hub_repo: A repo the hub stand-in has: hub names are that one or anything at all.
    """
    doc = copy.deepcopy(spec)
    doc.pop("security", None)
    for item in doc["paths"].values():
        for op in item.values():
            if isinstance(op, dict):
                op.pop("security", None)
    collection = _body_schema(doc, "post", "/api/docs/collections")
    if collection is not None:
        # The fuzz's own folder, or names that cannot leave the server's (empty) working folder: no '/',
        # no '.', no '~'; NUL characters among them.
        elsewhere = {"type": "string", "pattern": "^[A-Za-z0-9 _\\x00-]{1,12}$"}
        collection["properties"]["paths"] = {
            "type": "array", "minItems": 1, "maxItems": 2,
            "items": {"anyOf": [{"enum": [docs_folder]}, elsewhere, *ODD_PATHS]},
        }  # fmt: skip
    for route, fields in (("/api/models/import", ("path", "mmproj")), ("/api/folders", ("path",))):
        body = _body_schema(doc, "post", route)
        for key in fields if body is not None else ():
            if key in body.get("properties", {}):
                body["properties"][key] = _or_odd_path(body["properties"][key])
    for route in ("/api/fit", "/api/folders"):
        for param in doc["paths"].get(route, {}).get("get" if route == "/api/fit" else "delete", {}).get("parameters", []):
            if param["name"] in ("model", "path"):
                param["schema"] = _or_odd_path(param["schema"])
    remote = _body_schema(doc, "post", "/api/remotes")
    if remote is not None:
        remote["properties"]["url"] = {"enum": [remote_url]}
    real = {"type": "string", "enum": [hub_repo]}
    download = _body_schema(doc, "post", "/api/downloads")
    if download is not None:
        download["properties"]["repo"] = {"anyOf": [real, download["properties"]["repo"]]}
    pull = _body_schema(doc, "post", "/api/pull")
    if pull is not None:
        for key in ("model", "name"):
            if key in pull.get("properties", {}):
                pull["properties"][key] = {"anyOf": [real, pull["properties"][key]]}
    for param in doc["paths"].get("/api/hub/variants", {}).get("get", {}).get("parameters", []):
        if param["name"] == "repo":
            param["schema"] = {"anyOf": [real, param["schema"]]}
    for node in _nodes(doc["components"].get("schemas", {})):
        props = node.get("properties")
        if isinstance(props, dict):
            for key in _GENERATION_LIMITS:
                if key in props:
                    props[key] = _bounded_int(1, MAX_TOKENS)
                    if key in _UNBOUNDED_WHEN_LEFT_OUT:
                        node["required"] = sorted({*node.get("required", []), key})
    for node in _nodes(_request_schemas(doc)):
        props = node.get("properties")
        if isinstance(props, dict):
            if "keep_alive" in props:
                props["keep_alive"] = KEEP_ALIVE
            if "chat_template_kwargs" in props:
                props["chat_template_kwargs"] = TEMPLATE_KWARGS
    _cap_sizes(doc)
    return doc


def _error_key(response) -> str:
    """What tells one refusal from another: the error's param and code."""
    try:
        err = response.json()["error"]
        return f" {err.get('param')}/{err.get('code')}"
    except (ValueError, KeyError, TypeError):
        return ""


@dataclass
class Findings:
    """What a run found: cases sent, and each distinct failure with a curl command to replay it."""

    cases: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    by_operation: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    http_seconds: float = 0.0

    def add(self, key: str, detail: str) -> None:
        self.failures.setdefault(key, detail)

    def summary(self) -> str:
        lines = [f"{self.cases} cases, {len(self.failures)} distinct failures ({self.http_seconds:.0f} s in HTTP)"]
        lines += [f"  {op}: {n} cases" for op, n in sorted(self.by_operation.items())]
        lines.append("  statuses: " + ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items())))
        lines += [f"--- {key}\n{detail}" for key, detail in self.failures.items()]
        return "\n".join(lines)


class OpenAISchemas:
    """Validators for OpenAI's component schemas (its 3.0-style `nullable` read as JSON Schema)."""

    def __init__(self, spec: dict) -> None:
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012

        doc = _fix_nullable(spec)
        self.registry = Registry().with_resource("urn:openai", Resource.from_contents(doc, default_specification=DRAFT202012))
        self._validators: dict[str, Any] = {}

    def validate(self, component: str, instance: Any) -> None:
        import jsonschema

        v = self._validators.get(component)
        if v is None:
            schema = {"$ref": f"urn:openai#/components/schemas/{component}"}
            v = self._validators[component] = jsonschema.Draft202012Validator(schema, registry=self.registry)
        v.validate(instance)


def _fix_nullable(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _fix_nullable(v) for k, v in node.items()}
        if node.pop("nullable", False) is True:
            node = {"anyOf": [node, {"type": "null"}]}
        return node
    if isinstance(node, list):
        return [_fix_nullable(v) for v in node]
    return node


def response_checks(openai: OpenAISchemas) -> list[Callable]:
    """Hearth's own checks on every response: OpenAI-shaped errors, and streams chunk by chunk."""
    import jsonschema

    def error_is_openai_shaped(ctx, response, case):
        if response.status_code >= 400:
            try:
                openai.validate("ErrorResponse", response.json())
            except (ValueError, jsonschema.ValidationError) as exc:
                raise AssertionError(f"error body not in OpenAI's shape: {exc}; body {response.text[:300]}") from None
            message = response.json()["error"]["message"]
            if not message.endswith("."):
                raise AssertionError(f"error message is not a sentence: {message!r}")
        return True

    def stream_chunks_validate(ctx, response, case):
        if response.status_code != 200 or "text/event-stream" not in response.headers.get("content-type", [""])[0]:
            return True
        data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        if not data or data[-1] != "[DONE]":
            raise AssertionError("the stream does not end with data: [DONE]")
        chat = case.path.endswith("/chat/completions")
        # an echoed prompt's first token has no log-probability: null, as OpenAI's legacy API and vLLM give it
        echoed = not chat and isinstance(case.body, dict) and case.body.get("echo") is True
        scored: set = set()  # the choices whose first log-probabilities were met
        for raw in data[:-1]:
            chunk = json.loads(raw)
            if echoed and "error" not in chunk:
                _first_echoed_filled(chunk, scored)
            try:
                if "error" in chunk:
                    openai.validate("ErrorResponse", chunk)
                elif chat:
                    openai.validate("CreateChatCompletionStreamResponse", chunk)
                    if any("logprobs" in c and c["logprobs"] is None for c in chunk["choices"]):
                        raise AssertionError(f"a chunk carries logprobs: null: {raw}")
                else:  # the spec shares one shape for plain and streamed completions; null until the end
                    fixed = [{**c, "finish_reason": c["finish_reason"] or "stop"} for c in chunk["choices"]]
                    openai.validate("CreateCompletionResponse", {**chunk, "choices": fixed})
            except jsonschema.ValidationError as exc:
                raise AssertionError(f"streamed chunk off OpenAI's schema: {exc.message}; chunk {raw[:300]}") from None
        return True

    return [error_is_openai_shaped, stream_chunks_validate]


def _first_echoed_filled(chunk: dict, scored: set) -> None:
    """In place: the null log-probability of each choice's echoed first token given a number, for OpenAI's schema
    (which types every entry a number); ``scored``: the choices already past their first log-probabilities."""
    for c in chunk.get("choices") or ():
        lp = c.get("logprobs") if isinstance(c, dict) else None
        if not isinstance(lp, dict) or not lp.get("token_logprobs") or c.get("index") in scored:
            continue
        scored.add(c.get("index"))
        if lp["token_logprobs"][0] is None:
            lp["token_logprobs"][0] = 0.0
        if lp.get("top_logprobs") and lp["top_logprobs"][0] is None:
            lp["top_logprobs"][0] = {}


def fuzz(
    schema_doc: dict,
    base_url: str,
    *,
    headers: dict[str, str],
    openai: OpenAISchemas | None,
    max_examples: int | dict[str, int],
    conformance: bool,
    server_errors_only: bool = False,
    seed: int | None = 0,
    timeout: float = 120.0,
    deadline: float | None = None,
    seconds_per_operation: float | None = None,
    min_examples: int = 0,
    findings: Findings | None = None,
) -> Findings:
    """Send ``max_examples`` generated requests per operation of ``schema_doc`` to ``base_url``.

    Args:
        max_examples: Cases per operation, or per operation by HTTP method (``{"POST": 40, "GET": 5}``).
        conformance: Also check status codes, content types and bodies against ``schema_doc``'s
            documented responses (the server's own document documents its errors; OpenAI's does not).
        server_errors_only: Check only that no answer is a 5xx (or a hang): for every operation of the
            server, whose dialects answer errors in their own shapes.
        seed: None draws new cases each run; otherwise the same cases every run.
        timeout: Seconds a response may take before it counts as a hang.
        deadline: ``time.monotonic()`` after which no new case is started.
        seconds_per_operation: After this long on one operation, no new case of it is started
            (once ``min_examples`` of it have run).
    """
    import hypothesis
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase
    from schemathesis.checks import not_a_server_error
    from schemathesis.core.failures import FailureGroup
    from schemathesis.specs.openapi import checks as oa

    findings = findings or Findings()
    schema = schemathesis.openapi.from_dict(schema_doc)
    if server_errors_only:
        checks = [not_a_server_error]
    else:
        assert openai is not None, "the OpenAI checks need OpenAI's schemas"
        checks = [not_a_server_error, oa.positive_data_acceptance, *response_checks(openai)]
    if conformance:
        checks += [oa.status_code_conformance, oa.content_type_conformance, oa.response_schema_conformance]
    session = requests.Session()

    def run_operation(operation, examples: int, stop: float | None) -> None:
        @hypothesis.settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
            derandomize=seed is not None,  # the same cases every run
        )
        @hypothesis.given(operation.as_strategy())
        def run(case):
            label = case.operation.label
            if stop is not None and time.monotonic() > stop and findings.by_operation.get(label, 0) >= min_examples:
                return
            findings.cases += 1
            findings.by_operation[label] = findings.by_operation.get(label, 0) + 1
            start = time.monotonic()
            try:
                response = case.call(base_url=base_url, headers=headers, session=session, timeout=timeout)
            except requests.Timeout:
                findings.add(f"{label}: no answer within {timeout:g} s", case.as_curl_command(headers=headers))
                return
            except requests.ConnectionError as exc:
                findings.add(f"{label}: connection failed", f"{exc}\n{case.as_curl_command(headers=headers)}")
                return
            finally:
                findings.http_seconds += time.monotonic() - start
            findings.statuses[response.status_code] = findings.statuses.get(response.status_code, 0) + 1
            try:
                case.validate_response(response, checks=checks, headers=headers)
            except FailureGroup as group:
                for failure in group.exceptions:
                    key = f"{label}: {failure.title} [{response.status_code}{_error_key(response)}]"
                    findings.add(key, str(group)[:3000])

        run()

    for result in schema.get_all_operations():
        operation = result.ok()
        examples = max_examples if isinstance(max_examples, int) else max_examples.get(operation.method.upper(), 0)
        stop = deadline
        if seconds_per_operation is not None:
            stop = min(stop or math.inf, time.monotonic() + seconds_per_operation)
        if examples:
            run_operation(operation, examples, stop)
    session.close()
    return findings
