#!/usr/bin/env python3
"""Build step: embeds text files into C sources.

  embed.py migrations OUT.c IN.sql...   schema/NNN_name.sql files as db_migrations[]
  embed.py openapi SYMBOL OUT.c API.yaml SPEC.json ROW.json
                                        the API contract, with the spec's and the results
                                        row's JSON Schemas inlined, as const char SYMBOL[]
                                        (+ SYMBOL_len)

The daemon carries its migrations and its API contract in its binary, so a database is
always upgraded by exactly the schema the binary was built with and /v1/openapi.yaml
always describes the binary that serves it. Migration files must be named NNN_name.sql
with NNN = 001, 002, ... without gaps.

The contract's components.schemas.Spec is, in api/openapi.yaml, a $ref to
schema/spec.schema.json (JSON Schema 2020-12, generated from common/spec_table.c's field table).
The served contract must stand alone, so the build replaces that one line by the schema
itself, translated to OpenAPI 3.0's schema dialect, and fills in SpecField (the spec's
field names, what group_by takes) from it, and Strategy and StrategyList from
schema/vocabulary.json beside it (openapi_document below). ResultRow is likewise a $ref to
schema/result_row.schema.json (generated from common/columns.c's table), inlined the same
way.
Decision: the contract stays OpenAPI 3.0.3 rather than becoming 3.1 (which takes 2020-12
as is), because 3.0 is what client generators (openapi-generator, oapi-codegen, NSwag)
support fully, and schemathesis handles both alike. The translation is exact: const is a
one-value enum, a numeric exclusive bound is minimum/maximum with exclusiveMinimum/
exclusiveMaximum: true, "if A then B" is anyOf [not A, B], a boolean schema is {} or
{not: {}}; a keyword 3.0 lacks fails the build instead of being dropped silently.
"""
import json
import os
import re
import sys


def c_bytes(text):
    """A brace-enclosed byte array with a terminating NUL: ISO C caps string literals at
    4095 characters (-Woverlength-strings), arrays have no such limit."""
    data = text.encode("utf-8") + b"\0"
    lines = []
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join(f"0x{b:02x}" for b in data[i:i + 16]) + ",")
    return "{\n" + "\n".join(lines) + "\n}"


SPEC_REF_LINE = '    Spec: {$ref: "../schema/spec.schema.json"}\n'
SPEC_FIELD_LINE = "    SpecField: {type: string}\n"
# The strategy names (a name, and a list of 1 to all of them), from schema/vocabulary.json
# beside spec.schema.json: the contract's copy of common/vocab.h's list is generated too.
STRATEGY_LINE = "    Strategy: {type: string}\n"
STRATEGY_LIST_LINE = "    StrategyList: {type: array}\n"
ROW_REF_LINE = '    ResultRow: {$ref: "../schema/result_row.schema.json"}\n'
# 2020-12 keywords with no OpenAPI 3.0 equivalent: a schema using one cannot be published
UNSUPPORTED = {"prefixItems", "dependentRequired", "dependentSchemas", "unevaluatedItems",
               "unevaluatedProperties", "patternProperties", "propertyNames", "contains",
               "$defs", "$ref", "$dynamicRef", "$anchor"}


def to_oas30(node):
    """A JSON Schema 2020-12 node as an OpenAPI 3.0 Schema Object (same instances valid)."""
    if node is True:
        return {}
    if node is False:
        return {"not": {}}
    if not isinstance(node, dict):
        raise ValueError(f"not a schema: {node!r}")
    bad = UNSUPPORTED & set(node)
    if bad:
        raise ValueError(f"keywords without an OpenAPI 3.0 form: {sorted(bad)}")
    out, rules = {}, []
    for key, value in node.items():
        if key in ("$schema", "$id", "$comment", "if", "then", "else"):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            if len(kinds) != 1:
                raise ValueError(f"type {value}: OpenAPI 3.0 has one type (and nullable)")
            out["type"], out["nullable"] = kinds[0], "null" in value
        elif key == "examples":
            out["example"] = value[0]
        elif key == "properties":
            out[key] = {k: to_oas30(v) for k, v in value.items()}
        elif key == "additionalProperties" and isinstance(value, bool):
            out[key] = value  # 3.0 takes a boolean here
        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_oas30(value)
        elif key == "allOf":
            out[key] = allof_to_oas30(value, node.get("required", []))
        elif key in ("anyOf", "oneOf"):
            out[key] = [to_oas30(v) for v in value]
        else:
            out[key] = value
    if "if" in node:
        cond = to_oas30(node["if"])
        if "then" in node:
            rules.append({"anyOf": [negate(cond)] + alternatives(to_oas30(node["then"]))})
        if "else" in node:
            rules.append({"anyOf": [cond] + alternatives(to_oas30(node["else"]))})
    if rules and not out:
        return rules[0] if len(rules) == 1 else {"allOf": rules}
    if rules:
        out["allOf"] = out.get("allOf", []) + rules
    return out


def alternatives(schema):
    """schema as a list of anyOf branches: its own when it is only an anyOf (one level
    fewer for a generator to combine), else [schema]."""
    return schema["anyOf"] if set(schema) == {"anyOf"} else [schema]


def switch_field(rule, required):
    """(f, absent) when rule is {if: {properties: {f: {const: c}}, required: [f]}, then: ...}
    (absent False) or the same without required (absent True: an absent f, which takes its
    default c, counts as c; False again when the enclosing schema requires f): rules on one
    field with different constants exclude each other. None for any other rule."""
    cond = rule.get("if")
    if set(rule) != {"if", "then"} or not isinstance(cond, dict):
        return None
    props = cond.get("properties", {})
    if len(props) != 1 or set(cond) - {"properties", "required"}:
        return None
    (name, schema), = props.items()
    if cond.get("required", [name]) != [name] or set(schema) != {"const"}:
        return None
    return name, "required" not in cond and name not in required


def allof_to_oas30(items, required):
    """allOf items, the if/then rules on one field merged into one anyOf ("switch"):
    n rules "if f = c_i then T_i" with distinct c_i hold exactly when f is none of the c_i,
    or f = c_i and T_i for some i. Decision: n anyOfs of 2 would make a generator try 2^n
    combinations (schemathesis's gives up on 5 or more); one anyOf of n+1 does not. (The
    spec's 4 switches together are still too many for it: test_schemathesis narrows one.)"""
    out, switches = [], {}
    for item in items:
        found = isinstance(item, dict) and switch_field(item, required)
        if not found:
            out.append(to_oas30(item))
            continue
        name, absent = found
        value = item["if"]["properties"][name]["const"]
        case = switches.setdefault(name, {}).setdefault(json.dumps(value), [absent, []])
        if case[0] != absent:
            raise ValueError(f"rules on {name} = {value} disagree on an absent {name}")
        case[1].append(to_oas30(item["then"]))
    return out + [{"anyOf": switch_branches(name, cases)} for name, cases in switches.items()]


def switch_branches(name, cases):
    """The anyOf branches of one switch: f is none of the constants (or absent, unless a
    constant stands for an absent f), or f = c_i (or absent, for that constant) and T_i."""
    values = [json.loads(v) for v in cases]
    other = {"properties": {name: {"not": {"enum": values}}}}
    if any(absent for absent, _ in cases.values()):
        other["required"] = [name]
    branches = [other]
    for v, (absent, thens) in cases.items():
        branch = {"properties": {name: {"enum": [json.loads(v)]}}}
        if not absent:
            branch["required"] = [name]
        for then in thens:  # merged into one object schema where they only add properties
            props = then.get("properties", {}) if set(then) == {"properties"} else None
            if props is None or set(props) & set(branch["properties"]):
                branch.setdefault("allOf", []).append(then)
            else:
                branch["properties"].update(props)
        branches.append(branch)
    return branches


def negate(cond):
    """{not: cond}, with the negation moved inside when cond tests one property
    ({properties: {f: S}}, optionally required [f]), and on into S when S is such a test
    of an object or {not: X}: a generator (schemathesis's) builds objects from a negated
    property schema far more easily than from a negated object."""
    props = cond.get("properties", {})
    if set(cond) <= {"properties", "required"} and len(props) == 1:
        (name, schema), = props.items()
        if cond.get("required", [name]) == [name]:
            neg = {"properties": {name: negate_value(schema)}}  # absent, or present, not S
            if "required" not in cond:  # then absent satisfies cond: present and not S
                neg["required"] = [name]
            return neg
    return {"not": cond}


def negate_value(schema):
    """{not: schema} for a property's value: X for {not: X}; for a one-property test of an
    object, the object whose property fails it (negate); else {not: schema}."""
    if set(schema) == {"not"}:
        return schema["not"]
    neg = negate(schema)
    if "not" not in neg:
        neg["type"] = "object"  # a value that is no object passes the test, so fails this
    return neg


def openapi_document(api_path, spec_schema_path, row_schema_path):
    """api/openapi.yaml's text with its Spec line replaced by the translated spec schema,
    indented JSON (a YAML flow mapping), so the rest of the file is served byte for byte."""
    with open(api_path, encoding="utf-8") as f:
        text = f.read()
    with open(spec_schema_path, encoding="utf-8") as f:
        schema = to_oas30(json.load(f))
    vocabulary_path = os.path.join(os.path.dirname(spec_schema_path), "vocabulary.json")
    with open(vocabulary_path, encoding="utf-8") as f:
        rows = json.load(f)["strategies"]
    strategies = [s["name"] for s in rows]
    # what POST /v1/predict models: a single-process strategy's exchange is inside one
    # process (daemon/perf.c perf_strategy_parse refuses it)
    modelled = [s["name"] for s in rows if not s.get("single_process")]
    with open(row_schema_path, encoding="utf-8") as f:
        row = to_oas30(json.load(f))
    for line in (SPEC_REF_LINE, SPEC_FIELD_LINE, STRATEGY_LINE, STRATEGY_LIST_LINE,
                 ROW_REF_LINE):
        if text.count(line) != 1:
            raise ValueError(f"{api_path}: expected the line {line.strip()!r} once")
    body = json.dumps(schema, indent=2).replace("\n", "\n      ")
    fields = {"type": "string", "enum": [f for f in schema["properties"] if f != "sweep"]}
    strategy = {"type": "string", "enum": strategies}
    strategy_list = {"type": "array", "minItems": 1, "maxItems": len(modelled),
                     "items": {"type": "string", "enum": modelled}}
    row_body = json.dumps(row, indent=2).replace("\n", "\n      ")
    return text.replace(SPEC_REF_LINE, "    Spec:\n      " + body + "\n").replace(
        SPEC_FIELD_LINE, f"    SpecField: {json.dumps(fields)}\n").replace(
        STRATEGY_LINE, f"    Strategy: {json.dumps(strategy)}\n").replace(
        STRATEGY_LIST_LINE, f"    StrategyList: {json.dumps(strategy_list)}\n").replace(
        ROW_REF_LINE, "    ResultRow:\n      " + row_body + "\n")


def write_c_text(symbol, out_path, text):
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("/* Generated by schema/embed.py. Do not edit. */\n#include <stddef.h>\n\n")
        f.write(f"extern const char {symbol}[];\nextern const size_t {symbol}_len;\n")
        f.write(f"const char {symbol}[] = {c_bytes(text)};\n")
        f.write(f"const size_t {symbol}_len = sizeof {symbol} - 1;\n")


def embed_migrations(out_path, paths):
    items = []
    for p in sorted(paths, key=os.path.basename):
        m = re.fullmatch(r"(\d{3})_([a-z0-9_]+)\.sql", os.path.basename(p))
        if not m:
            sys.exit(f"embed.py: bad migration file name {p}")
        with open(p, encoding="utf-8") as f:
            items.append((int(m.group(1)), m.group(2), f.read()))
    for i, (version, _, _) in enumerate(items, start=1):
        if version != i:
            sys.exit(f"embed.py: migration {i:03d} missing (found {version:03d})")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("/* Generated by schema/embed.py from the schema SQL files. Do not edit. */\n")
        f.write('#include "daemon/migrations.h"\n\n')
        for version, name, sql in items:
            f.write(f"static const char migration_{version:03d}[] = {c_bytes(sql)};\n\n")
        f.write("const struct db_migration db_migrations[] = {\n")
        for version, name, _ in items:
            f.write(f'    {{{version}, "{name}", migration_{version:03d}}},\n')
        f.write("};\n")
        f.write(f"const int db_migration_count = {len(items)};\n")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "migrations":
        embed_migrations(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 7 and sys.argv[1] == "openapi":
        try:
            write_c_text(sys.argv[2], sys.argv[3],
                         openapi_document(sys.argv[4], sys.argv[5], sys.argv[6]))
        except ValueError as ex:
            sys.exit(f"embed.py: {ex}")
    else:
        sys.exit(__doc__)
