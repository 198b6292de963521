"""A small evaluator of Terraform HCL for the data-plane tests (no terraform binary runs here).

It evaluates the real expressions of `infra/terraform` (variables with their type constraints and
optional() defaults, locals, module calls with for_each, outputs, validations) on python-hcl2's
parse tree, for the subset of the language and functions the configuration uses. Attributes only
known after apply (ARNs, ids, DNS names) come from a resolver the test supplies. Anything outside
the subset raises HclEvalError, so a new construct fails a test instead of being guessed.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
from lark import Token, Tree

META_ARGS = {"source", "for_each", "count", "depends_on", "providers", "lifecycle"}
NOISE = {"new_line_or_comment"}


class HclEvalError(Exception):
    """An expression could not be evaluated (unsupported construct, bad type, missing value)."""


def parse_file(path: Path) -> Tree:
    """Parse one HCL file into python-hcl2's lark tree (cached by content: parsing is slow)."""
    return _parse_text(path.read_text())


@functools.lru_cache(maxsize=256)
def _parse_text(text: str) -> Tree:
    return hcl2.parses_to_tree(text)


def _trees(node: Tree) -> list[Tree]:
    return [c for c in node.children if isinstance(c, Tree) and c.data not in NOISE]


def _name(node: Tree) -> str:
    """Identifier or plain string label value."""
    if node.data in ("identifier", "keyword", "literal_value"):
        return str(node.children[0])
    if node.data == "string":
        return "".join(_unescape(str(p.children[0])) for p in _trees(node))
    if node.data in ("expr_term", "object_elem_key"):
        return _name(_trees(node)[0])
    raise HclEvalError(f"expected a name, got {node.data}")


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(raw: str) -> str:
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt == "u":
                out.append(chr(int(raw[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        if raw.startswith("$${", i) or raw.startswith("%%{", i):
            out.append(raw[i + 1 : i + 3])
            i += 3
            continue
        out.append(raw[i])
        i += 1
    return "".join(out)


@dataclass
class Body:
    """Attributes (expression trees) and nested blocks of one HCL body."""

    attributes: dict[str, Tree] = field(default_factory=dict)
    blocks: list[tuple[str, list[str], Body]] = field(default_factory=list)


def read_body(node: Tree) -> Body:
    """Split a body tree into attributes and blocks (type, labels, body)."""
    body = Body()
    for child in _trees(node):
        if child.data == "attribute":
            key, expr = _trees(child)
            body.attributes[_name(key)] = expr
        elif child.data == "block":
            parts = _trees(child)
            inner = parts[-1] if parts[-1].data == "body" else Tree("body", [])
            labels = [_name(p) for p in parts[1:] if p.data in ("string", "identifier")]
            body.blocks.append((_name(parts[0]), labels, read_body(inner)))
    return body


def read_dir(path: Path) -> Body:
    """Merge the bodies of every .tf file of a module directory."""
    merged = Body()
    for tf in sorted(path.glob("*.tf")):
        body = read_body(_trees(parse_file(tf))[0])
        merged.attributes.update(body.attributes)
        merged.blocks.extend(body.blocks)
    return merged


def read_tfvars(*paths: Path) -> dict[str, Tree]:
    """Attribute expressions of tfvars files (later files win, as with -var-file)."""
    values: dict[str, Tree] = {}
    for path in paths:
        values.update(read_body(_trees(parse_file(path))[0]).attributes)
    return values


# ---- values -----------------------------------------------------------------------------------


def to_string(value: Any) -> str:
    """Terraform's tostring / template conversion of a primitive."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(_num(value))
    if isinstance(value, str):
        return value
    raise HclEvalError(f"cannot convert {type(value).__name__} {value!r} to string")


def _num(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HclEvalError(f"expected a number, got {value!r}")
    return int(value) if float(value).is_integer() else value


def jsonencode(value: Any) -> str:
    """Terraform's jsonencode: compact, object keys sorted, whole numbers without a fraction."""

    def norm(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: norm(v[k]) for k in sorted(v)}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, (ModuleOutputs, ResourceRef)):
            raise HclEvalError("jsonencode of a module or resource reference")
        return v

    return json.dumps(norm(value), separators=(",", ":"), ensure_ascii=False)


def _items(collection: Any) -> list[tuple[Any, Any]]:
    if isinstance(collection, dict):
        return [(k, collection[k]) for k in sorted(collection)]
    if isinstance(collection, (list, tuple)):
        return list(enumerate(collection))
    raise HclEvalError(f"cannot iterate over {collection!r}")


def _flatten(value: list) -> list:
    out: list = []
    for item in value:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def _range(*args: Any) -> list:
    nums = [_num(a) for a in args]
    start, stop, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    return list(range(int(start), int(stop), int(step)))


def _coalesce(*args: Any) -> Any:
    for arg in args:
        if arg is not None and arg != "":
            return arg
    raise HclEvalError("coalesce: no non-null, non-empty argument")


def _cidrnetmask(cidr: str) -> str:
    try:
        return str(ipaddress.IPv4Network(cidr, strict=False).netmask)
    except ValueError as exc:
        raise HclEvalError(f"invalid CIDR {cidr!r}") from exc


def _regex(pattern: str, text: str) -> Any:
    match = re.search(pattern, text)
    if match is None:
        raise HclEvalError(f"regex {pattern!r} does not match {text!r}")
    return match.group(0)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "alltrue": lambda xs: all(xs),
    "anytrue": lambda xs: any(xs),
    "cidrnetmask": _cidrnetmask,
    "coalesce": _coalesce,
    "concat": lambda *xs: [item for x in xs for item in x],
    "contains": lambda xs, v: v in xs,
    "distinct": lambda xs: [x for i, x in enumerate(xs) if x not in xs[:i]],
    "endswith": lambda s, suffix: s.endswith(suffix),
    "flatten": _flatten,
    "floor": lambda x: math.floor(_num(x)),
    "join": lambda sep, xs: sep.join(to_string(x) for x in xs),
    "jsonencode": jsonencode,
    "keys": lambda m: sorted(m),
    "length": len,
    "lower": lambda s: s.lower(),
    "max": lambda *xs: max(_num(x) for x in xs),
    "min": lambda *xs: min(_num(x) for x in xs),
    "pow": lambda a, b: _num(_num(a) ** _num(b)),
    "range": _range,
    "regex": _regex,
    "replace": lambda s, old, new: s.replace(old, new),
    "split": lambda sep, s: s.split(sep),
    "startswith": lambda s, prefix: s.startswith(prefix),
    "substr": lambda s, offset, length: s[int(offset) :] if length == -1 else s[int(offset) : int(offset) + int(length)],
    "tonumber": lambda v: v if isinstance(v, (int, float)) else _num(float(v)),
    "toset": lambda xs: [x for i, x in enumerate(xs) if x not in xs[:i]],
    "tostring": lambda v: None if v is None else to_string(v),
    "trim": lambda s, chars: s.strip(chars),
    "values": lambda m: [m[k] for k in sorted(m)],
}
LAZY_FUNCTIONS = {"can", "try"}


# ---- type constraints ------------------------------------------------------------------------


def convert(value: Any, type_expr: Tree | None, where: str) -> Any:
    """Convert a value to a type constraint, filling optional() defaults like Terraform does."""
    if type_expr is None or value is None:
        return value
    node = _trees(type_expr)[0] if type_expr.data == "expr_term" else type_expr
    if node.data == "identifier":
        kind = _name(node)
        if kind == "any":
            return value
        if kind == "string":
            return to_string(value)
        if kind == "number":
            return _num(float(value)) if isinstance(value, str) else _num(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise HclEvalError(f"{where}: expected bool, got {value!r}")
            return value
        raise HclEvalError(f"{where}: unsupported type {kind}")
    if node.data != "function_call":
        raise HclEvalError(f"{where}: unsupported type expression {node.data}")
    parts = _trees(node)
    kind, args = _name(parts[0]), _trees(parts[1]) if len(parts) > 1 else []
    if kind in ("list", "set"):
        if not isinstance(value, list):
            raise HclEvalError(f"{where}: expected a list, got {value!r}")
        return [convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if kind == "map":
        if not isinstance(value, dict):
            raise HclEvalError(f"{where}: expected a map, got {value!r}")
        return {k: convert(v, args[0], f"{where}.{k}") for k, v in value.items()}
    if kind == "object":
        if not isinstance(value, dict):
            raise HclEvalError(f"{where}: expected an object, got {value!r}")
        attrs = _object_type_attrs(args[0])
        unknown = sorted(set(value) - set(attrs))
        if unknown:
            raise HclEvalError(f"{where}: unknown attributes {unknown}; allowed: {sorted(attrs)}")
        out = {}
        for attr, (attr_type, optional, default) in attrs.items():
            present = value.get(attr)
            if present is None:
                if not optional:
                    raise HclEvalError(f"{where}.{attr} is required")
                present = default
            out[attr] = convert(present, attr_type, f"{where}.{attr}")
        return out
    raise HclEvalError(f"{where}: unsupported type {kind}()")


def _object_type_attrs(obj_expr: Tree) -> dict[str, tuple[Tree, bool, Any]]:
    obj = _trees(obj_expr)[0]
    attrs: dict[str, tuple[Tree, bool, Any]] = {}
    for elem in _trees(obj):
        key, attr_type = _trees(elem)
        inner = _trees(attr_type)[0] if attr_type.data == "expr_term" else attr_type
        if inner.data == "function_call" and _name(_trees(inner)[0]) == "optional":
            args = _trees(_trees(inner)[1])
            default = Scope(None).eval(args[1]) if len(args) > 1 else None
            attrs[_name(key)] = (args[0], True, default)
        else:
            attrs[_name(key)] = (attr_type, False, None)
    return attrs


# ---- references ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceRef:
    """A managed resource or data source instance; its attributes come from the module's resolver."""

    module: Module
    mode: str  # "resource" or "data"
    type: str
    name: str
    index: Any = None

    def attr(self, attr: str) -> Any:
        """Value of an attribute known after apply (asked from the resolver)."""
        return self.module.config.resolver(self, attr)

    def argument(self, name: str) -> Any:
        """Evaluate one configuration argument of this resource."""
        body = self.module.resource_body(self.mode, self.type, self.name)
        if name not in body.attributes:
            raise HclEvalError(f"{self.type}.{self.name} has no argument {name}")
        extra = {"count": {"index": self.index}} if isinstance(self.index, int) else {}
        return Scope(self.module, extra).eval(body.attributes[name])


class _Namespace:
    def __init__(self, lookup: Callable[[str], Any]):
        self.lookup = lookup


class ModuleOutputs:
    """module.<name> (or one for_each instance of it): outputs evaluated on access."""

    def __init__(self, module: Module):
        self.module = module


@dataclass
class Config:
    """What every module of one evaluation shares: the resolver of apply-time attributes."""

    resolver: Callable[[ResourceRef, str], Any]
    region: str = ""


class Module:
    """One module instance: its directory, input expressions (evaluated lazily) and caches."""

    def __init__(self, path: Path, inputs: dict[str, Callable[[], Any]], config: Config, address: str = ""):
        self.path, self.inputs, self.config, self.address = path, inputs, config, address
        self.body = read_dir(path)
        self._vars: dict[str, Any] = {}
        self._locals: dict[str, Any] = {}
        self._modules: dict[str, Any] = {}
        self._local_exprs = {
            k: v for kind, _, b in self.body.blocks if kind == "locals" for k, v in b.attributes.items()
        }

    def blocks(self, kind: str) -> dict[str, Body]:
        """Blocks of one kind keyed by their joined labels."""
        return {".".join(labels): body for k, labels, body in self.body.blocks if k == kind}

    def resource_body(self, mode: str, rtype: str, name: str) -> Body:
        """The body of resource (or data source) rtype.name."""
        try:
            return self.blocks(mode)[f"{rtype}.{name}"]
        except KeyError:
            raise HclEvalError(f"{self.address or 'root'}: no {mode} {rtype}.{name}") from None

    def var(self, name: str) -> Any:
        """Input variable after type conversion (optional defaults) and default."""
        if name not in self._vars:
            decl = self.blocks("variable").get(name)
            if decl is None:
                raise HclEvalError(f"{self.address or 'root'}: undeclared variable {name}")
            if name in self.inputs:
                raw = self.inputs[name]()
            elif "default" in decl.attributes:
                raw = Scope(self).eval(decl.attributes["default"])
            else:
                raise HclEvalError(f"{self.address or 'root'}: variable {name} has no value and no default")
            self._vars[name] = convert(raw, decl.attributes.get("type"), f"var.{name}")
        return self._vars[name]

    def local(self, name: str) -> Any:
        """A local value, evaluated once."""
        if name not in self._locals:
            if name not in self._local_exprs:
                raise HclEvalError(f"{self.address or 'root'}: no local {name}")
            self._locals[name] = Scope(self).eval(self._local_exprs[name])
        return self._locals[name]

    def output(self, name: str) -> Any:
        """An output value."""
        decl = self.blocks("output").get(name)
        if decl is None:
            raise HclEvalError(f"{self.address or 'root'}: no output {name}")
        return Scope(self).eval(decl.attributes["value"])

    def module_call(self, name: str) -> Any:
        """module.<name>: ModuleOutputs, or a dict of them for for_each."""
        if name not in self._modules:
            call = self.blocks("module").get(name)
            if call is None:
                raise HclEvalError(f"{self.address or 'root'}: no module {name}")
            source = self.path / _name(call.attributes["source"])
            if "for_each" in call.attributes:
                each_of = Scope(self).eval(call.attributes["for_each"])
                self._modules[name] = {
                    key: ModuleOutputs(self._child(source, call, f"module.{name}[{key!r}]", {"key": key, "value": value}))
                    for key, value in _items(each_of)
                }
            else:
                self._modules[name] = ModuleOutputs(self._child(source, call, f"module.{name}", None))
        return self._modules[name]

    def _child(self, source: Path, call: Body, address: str, each: dict | None) -> Module:
        extra = {"each": each} if each is not None else {}
        inputs = {
            arg: (lambda expr=expr: Scope(self, extra).eval(expr))
            for arg, expr in call.attributes.items()
            if arg not in META_ARGS
        }
        return Module(source, inputs, self.config, address)

    def validations(self, name: str) -> list[tuple[bool, str]]:
        """(condition result, error message) of every validation block of variable name."""
        decl = self.blocks("variable")[name]
        results = []
        for kind, _, body in decl.blocks:
            if kind == "validation":
                ok = Scope(self).eval(body.attributes["condition"])
                message = Scope(self).eval(body.attributes["error_message"])
                results.append((ok, message))
        return results


class Scope:
    """Evaluates expression trees in one module with extra names (each, count, for variables)."""

    def __init__(self, module: Module | None, names: dict[str, Any] | None = None):
        self.module, self.names = module, names or {}

    def child(self, **names: Any) -> Scope:
        """A scope with more names (for-expression variables)."""
        return Scope(self.module, {**self.names, **names})

    def eval(self, node: Tree) -> Any:
        """Evaluate one expression tree."""
        handler = getattr(self, f"_e_{node.data}", None)
        if handler is None:
            raise HclEvalError(f"unsupported expression {node.data}")
        return handler(node)

    # -- literals
    def _e_expr_term(self, node: Tree) -> Any:
        inner = _trees(node)
        if len(inner) != 1:
            raise HclEvalError("unexpected expression term")
        return self.eval(inner[0])

    def _e_int_lit(self, node: Tree) -> int:
        return int(str(node.children[0]))

    def _e_float_lit(self, node: Tree) -> float:
        return float(str(node.children[0]))

    def _e_literal_value(self, node: Tree) -> Any:
        return {"true": True, "false": False, "null": None}[str(node.children[0])]

    def _e_string(self, node: Tree) -> str:
        out = []
        for part in _trees(node):
            (piece,) = part.children
            if isinstance(piece, Token):
                out.append(_unescape(str(piece)))
            elif piece.data == "interpolation":
                value = self.eval(_trees(piece)[0])
                if value is None:
                    raise HclEvalError("null value in a string template")
                out.append(to_string(value))
            else:
                raise HclEvalError(f"unsupported template directive {piece.data}")
        return "".join(out)

    def _e_tuple(self, node: Tree) -> list:
        return [self.eval(c) for c in _trees(node)]

    def _e_object(self, node: Tree) -> dict:
        out = {}
        for elem in _trees(node):
            key_node, value = _trees(elem)
            key_expr = _trees(key_node)[0]
            inner = _trees(key_expr)[0] if key_expr.data == "expr_term" else key_expr
            key = _name(inner) if inner.data == "identifier" else to_string(self.eval(key_expr))
            out[key] = self.eval(value)
        return out

    # -- operators
    def _e_unary_op(self, node: Tree) -> Any:
        op = str(node.children[0])
        value = self.eval(_trees(node)[0])
        if op == "!":
            if not isinstance(value, bool):
                raise HclEvalError(f"! needs a bool, got {value!r}")
            return not value
        return -_num(value)

    def _e_binary_op(self, node: Tree) -> Any:
        lhs_node, term = _trees(node)
        op_node, rhs_node = _trees(term)
        op = str(op_node.children[0])
        lhs, rhs = self.eval(lhs_node), self.eval(rhs_node)  # Terraform does not short-circuit
        if op in ("==", "!="):
            return _equal(lhs, rhs) == (op == "==")
        if op in ("&&", "||"):
            if not isinstance(lhs, bool) or not isinstance(rhs, bool):
                raise HclEvalError(f"{op} needs bools, got {lhs!r} and {rhs!r}")
            return (lhs and rhs) if op == "&&" else (lhs or rhs)
        a, b = _num(lhs), _num(rhs)
        ops: dict[str, Callable[[Any, Any], Any]] = {
            "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
            "/": lambda x, y: x / y, "%": lambda x, y: x % y,
            "<": lambda x, y: x < y, ">": lambda x, y: x > y, "<=": lambda x, y: x <= y, ">=": lambda x, y: x >= y,
        }  # fmt: skip
        result = ops[op](a, b)
        return result if isinstance(result, bool) else _num(result)

    def _e_conditional(self, node: Tree) -> Any:
        cond, then, other = _trees(node)
        flag = self.eval(cond)
        if not isinstance(flag, bool):
            raise HclEvalError(f"condition is not a bool: {flag!r}")
        return self.eval(then if flag else other)

    # -- functions
    def _e_function_call(self, node: Tree) -> Any:
        parts = _trees(node)
        name = _name(parts[0])
        args = _trees(parts[1]) if len(parts) > 1 else []
        if name in LAZY_FUNCTIONS:
            for i, arg in enumerate(args):
                try:
                    value = self.eval(arg)
                    return True if name == "can" else value
                except (HclEvalError, KeyError, IndexError, TypeError, ValueError):
                    if name == "can" or i == len(args) - 1:
                        if name == "can":
                            return False
                        raise
            raise HclEvalError(f"{name}() without arguments")
        if name not in FUNCTIONS:
            raise HclEvalError(f"function {name}() is not supported by the test evaluator")
        try:
            return FUNCTIONS[name](*[self.eval(a) for a in args])
        except (TypeError, ValueError, AttributeError) as exc:
            raise HclEvalError(f"{name}(): {exc}") from exc

    # -- for expressions
    def _for(self, intro: Tree) -> list[tuple[Scope, Any]]:
        parts = _trees(intro)
        names = [_name(p) for p in parts if p.data == "identifier"]
        collection = self.eval([p for p in parts if p.data != "identifier"][0])
        scopes = []
        for key, value in _items(collection):
            bound = {names[0]: key, names[1]: value} if len(names) == 2 else {names[0]: value}
            scopes.append(self.child(**bound))
        return scopes

    def _e_for_tuple_expr(self, node: Tree) -> list:
        intro, value, *cond = _trees(node)
        out = []
        for scope in self._for(intro):
            if cond and not scope.eval(_trees(cond[0])[0]):
                continue
            out.append(scope.eval(value))
        return out

    def _e_for_object_expr(self, node: Tree) -> dict:
        intro, key, value, *cond = _trees(node)
        if any(isinstance(c, Token) and str(c) == "..." for c in node.children):
            raise HclEvalError("grouping (...) for expressions are not supported")
        out = {}
        for scope in self._for(intro):
            if cond and not scope.eval(_trees(cond[0])[0]):
                continue
            out[to_string(scope.eval(key))] = scope.eval(value)
        return out

    # -- references
    def _e_identifier(self, node: Tree) -> Any:
        name = _name(node)
        if name in self.names:
            return self.names[name]
        module = self.module
        if module is None:
            raise HclEvalError(f"reference {name} outside a module")
        namespaces: dict[str, Callable[[str], Any]] = {
            "var": module.var,
            "local": module.local,
            "module": module.module_call,
            "data": lambda rtype: _Namespace(lambda rname: ResourceRef(module, "data", rtype, rname)),
        }
        if name in namespaces:
            return _Namespace(namespaces[name])
        if name == "path":
            return {"module": str(module.path)}
        return _Namespace(lambda rname: self._resource(name, rname))

    def _resource(self, rtype: str, rname: str) -> Any:
        body = self.module.resource_body("resource", rtype, rname)  # type: ignore[union-attr]
        if "count" in body.attributes:
            count = Scope(self.module).eval(body.attributes["count"])
            return [ResourceRef(self.module, "resource", rtype, rname, i) for i in range(count)]  # type: ignore[arg-type]
        return ResourceRef(self.module, "resource", rtype, rname)  # type: ignore[arg-type]

    def _e_get_attr_expr_term(self, node: Tree) -> Any:
        base, attr = _trees(node)
        return _get_attr(self.eval(base), _name(_trees(attr)[0]))

    def _e_index_expr_term(self, node: Tree) -> Any:
        base, index = _trees(node)
        key = self.eval(_trees(index)[0])
        value = self.eval(base)
        if isinstance(value, dict):
            if key not in value:
                raise HclEvalError(f"no key {key!r}; known: {sorted(value)}")
            return value[key]
        if isinstance(value, list):
            return value[int(key)]
        raise HclEvalError(f"cannot index {value!r}")

    def _e_full_splat_expr_term(self, node: Tree) -> list:
        base, splat = _trees(node)
        attrs = [_name(_trees(g)[0]) for g in _trees(splat) if g.data == "get_attr"]
        out = []
        for item in self.eval(base):
            for attr in attrs:
                item = _get_attr(item, attr)
            out.append(item)
        return out


def _equal(a: Any, b: Any) -> bool:
    """Terraform equality: bools never equal numbers, 1 equals 1.0, collections compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _get_attr(value: Any, attr: str) -> Any:
    if isinstance(value, _Namespace):
        return value.lookup(attr)
    if isinstance(value, ModuleOutputs):
        return value.module.output(attr)
    if isinstance(value, ResourceRef):
        return value.attr(attr)
    if isinstance(value, dict):
        if attr not in value:
            raise HclEvalError(f"no attribute {attr!r}; known: {sorted(value)}")
        return value[attr]
    raise HclEvalError(f"cannot read .{attr} of {value!r}")
