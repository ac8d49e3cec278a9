"""The OpenAPI document as the admin page's API reference (`/admin/api`).

Server-rendered from `openapi.document()` itself, so the page cannot drift from the
document the fuzz test checks: operations grouped by tag with their parameters,
request body and responses, then every schema with its properties. Types are written
out (`string | null`, `array of Job`, `one of PENDING, RUNNING, DEAD`) and references
link to the schema's section. No script, no CDN: it is plain HTML under the page's CSP.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

METHOD_ORDER = ("get", "post", "put", "patch", "delete")


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    where: str  # query, path, body property
    type: Markup
    required: bool
    description: str = ""


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str
    anchor: str
    summary: str
    description: str
    params: list[Field]
    body: Markup | None
    responses: list[tuple[str, str, Markup | None]]
    example: str  # a curl line


@dataclass(slots=True)
class Section:
    tag: str
    operations: list[Operation] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SchemaView:
    name: str
    anchor: str
    type: Markup
    properties: list[Field]
    example: str | None


def schema_anchor(name: str) -> str:
    return f"schema-{name}"


def type_of(schema: Any) -> Markup:
    """A JSON Schema written out for a reader, `$ref`s as links."""
    if not isinstance(schema, dict) or not schema:
        return Markup("any")
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return Markup('<a href="#{}">{}</a>').format(schema_anchor(name), name)
    if "const" in schema:
        return Markup("<code>{}</code>").format(json.dumps(schema["const"]))
    if "enum" in schema:
        return Markup("one of ") + Markup(", ").join(
            Markup("<code>{}</code>").format(v) for v in schema["enum"]
        )
    kinds = schema.get("type", "object")
    names = kinds if isinstance(kinds, list) else [kinds]
    parts = [_one_type(str(kind), schema) for kind in names]
    return Markup(" | ").join(parts) + _limits(schema)


def _one_type(kind: str, schema: dict[str, Any]) -> Markup:
    if kind == "array":
        return Markup("array of ") + type_of(schema.get("items"))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return Markup("map of name → ") + type_of(schema["additionalProperties"])
    if kind == "string" and "format" in schema:
        return Markup("{} ({})").format(kind, schema["format"])
    if kind == "string" and "pattern" in schema:
        return Markup("{} <code>{}</code>").format(kind, schema["pattern"])
    return Markup("{}").format(kind)


def _limits(schema: dict[str, Any]) -> Markup:
    bounds = [
        f"{word} {schema[key]}"
        for key, word in (("minimum", "≥"), ("maximum", "≤"), ("default", "default"))
        if key in schema
    ]
    return Markup(", {}").format(", ".join(bounds)) if bounds else Markup("")


def _properties(schema: dict[str, Any]) -> list[Field]:
    required = set(schema.get("required", ()))
    return [
        Field(name, "body", type_of(prop), name in required, str(prop.get("description", "")))
        for name, prop in schema.get("properties", {}).items()
    ]


def body_example(schemas: dict[str, Any], schema: Any) -> Any:
    """A request body to show: the schema's `example`, else each property's example or
    default (`$ref`s resolved in `schemas`)."""
    if isinstance(schema, dict) and "$ref" in schema:
        schema = schemas.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    if not isinstance(schema, dict):
        return {}
    if "example" in schema:
        return schema["example"]
    return {
        name: prop.get("example", prop.get("default", "…"))
        for name, prop in schema.get("properties", {}).items()
    }


def curl_example(method: str, path: str, body: Any | None) -> str:
    sent = ""
    if body is not None:
        text = json.dumps(body, ensure_ascii=False).replace("'", "'\\''")
        sent = f" -H 'Content-Type: application/json' -d '{text}'"
    verb = "" if method == "get" else f" -X {method.upper()}"
    return f'curl{verb} -H "Authorization: Bearer $JOBLEDGER_KEY"{sent} "$BASE{path}"'


def _operation(path: str, method: str, op: dict[str, Any], schemas: dict[str, Any]) -> Operation:
    params = [
        Field(
            p["name"],
            p["in"],
            type_of(p.get("schema")),
            bool(p.get("required")),
            str(p.get("description", "")),
        )
        for p in op.get("parameters", ())
    ]
    body_schema = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    responses = [
        (
            status,
            str(answer.get("description", "")),
            type_of(answer["content"]["application/json"]["schema"])
            if "content" in answer
            else None,
        )
        for status, answer in op.get("responses", {}).items()
    ]
    anchor = f"op-{method}-{path.strip('/').replace('/', '-').replace('{', '').replace('}', '')}"
    return Operation(
        method=method.upper(),
        path=path,
        anchor=anchor,
        summary=str(op.get("summary", "")),
        description=str(op.get("description", "")),
        params=params,
        body=type_of(body_schema["schema"]) if "schema" in body_schema else None,
        responses=responses,
        example=curl_example(
            method,
            path,
            body_example(schemas, body_schema["schema"]) if "schema" in body_schema else None,
        ),
    )


def sections(document: dict[str, Any]) -> list[Section]:
    """Operations grouped by their first tag, in the document's path order."""
    found: dict[str, Section] = {}
    schemas = document.get("components", {}).get("schemas", {})
    for path, ops in document.get("paths", {}).items():
        for method in sorted(ops, key=lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 9):
            op = ops[method]
            tag = (op.get("tags") or ["other"])[0]
            found.setdefault(tag, Section(tag)).operations.append(
                _operation(path, method, op, schemas)
            )
    return list(found.values())


def schemas(document: dict[str, Any]) -> list[SchemaView]:
    views = []
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        example = schema.get("example")
        views.append(
            SchemaView(
                name=name,
                anchor=schema_anchor(name),
                type=type_of({k: v for k, v in schema.items() if k != "properties"})
                if "properties" not in schema
                else Markup("object"),
                properties=_properties(schema),
                example=None if example is None else json.dumps(example, ensure_ascii=False),
            )
        )
    return views
