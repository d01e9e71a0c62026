#!/usr/bin/python3
"""validate.py OPENAPI TRACE... — every answer the integration suite got from
ferryd (FERRY_API_TRACE lines: method, url, route, status, body) checked
against api/openapi.json: the route and method are documented, the status is
one of the operation's responses, and a JSON body validates against that
response's schema (OpenAPI 3.0's nullable read as JSON Schema's null type).
Prints each kind of violation once with a count and an example, and exits 1
when there is any; a documented status with no schema is a violation too
(nothing could check it)."""
import collections, json, sys

import jsonschema


def to_jsonschema(node):
    """OpenAPI 3.0 schema objects → JSON Schema: nullable, and $ref kept (resolved by the resolver)."""
    if isinstance(node, list):
        return [to_jsonschema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_jsonschema(v) for k, v in node.items() if k not in ("nullable", "example", "x-ferry-role")}
    if node.get("nullable"):
        t = out.get("type")
        if isinstance(t, str):
            out["type"] = [t, "null"]
        elif "type" not in out:
            out = {"anyOf": [out, {"type": "null"}]}
        if "enum" in out:
            out["enum"] = list(out["enum"]) + [None]
    return out


def main():
    doc = json.load(open(sys.argv[1]))
    converted = to_jsonschema(doc)
    resolver = jsonschema.RefResolver.from_schema(converted)
    seen = collections.Counter()
    validators = {}
    example = {}
    checked = 0

    def bad(kind, line):
        seen[kind] += 1
        example.setdefault(kind, line)

    for path in sys.argv[2:]:
        for raw in open(path, errors="replace"):
            try:
                t = json.loads(raw)
            except ValueError:
                bad("trace: an unreadable line", raw[:200])
                continue
            route, method, status = t.get("route"), t.get("method", "").lower(), str(t.get("status"))
            if route is None:
                continue  # no route matched: the router's 404, the same for every path
            if method == "head":
                method = "get"
            op = converted["paths"].get(route, {}).get(method)
            checked += 1
            if op is None:
                bad("%s %s: not in the document" % (method.upper(), route), raw)
                continue
            resp = op.get("responses", {}).get(status)
            if resp is None:
                bad("%s %s: status %s not documented" % (method.upper(), route, status), raw)
                continue
            if "$ref" in resp:
                resp = resolver.resolve(resp["$ref"])[1]
            schema = (resp.get("content", {}).get("application/json", {}) or {}).get("schema")
            if t.get("streamed") or not t.get("content_type", "").startswith("application/json") or t.get("body_error"):
                continue  # a stream, not JSON, or a body too large to trace: its status was checked
            if schema is None:
                bad("%s %s %s: no schema for a JSON answer" % (method.upper(), route, status), raw)
                continue
            key = (route, method, status)
            if key not in validators:  # one validator a response: its schema checked once, not per answer
                validators[key] = jsonschema.Draft7Validator(schema, resolver=resolver)
            e = jsonschema.exceptions.best_match(validators[key].iter_errors(t.get("body")))
            if e is not None:
                where = "/".join(str(x) for x in e.absolute_path)
                bad("%s %s %s: %s at %s" % (method.upper(), route, status, e.message[:160], where or "(top)"), raw)
    for kind, n in sorted(seen.items()):
        print("openapi-validate: %5d × %s\n        e.g. %s" % (n, kind, example[kind][:400].rstrip()))
    print("openapi-validate: %d answers checked, %d violations of %d kinds" % (checked, sum(seen.values()), len(seen)))
    return 1 if seen else 0


if __name__ == "__main__":
    sys.exit(main())
