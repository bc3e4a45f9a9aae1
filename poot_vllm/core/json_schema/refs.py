"""``$ref`` resolution inside the schema document.

The compiler follows JSON-pointer references into the document itself
(``#``, ``#/$defs/Name``, ``#/definitions/Name``; RFC 6901 escapes ``~0``
``~1`` and percent-encoding are decoded).  :func:`local_refs` first rewrites
every other reference that the document itself can answer into that form,
with the base URIs JSON Schema defines: ``$anchor`` / ``$dynamicAnchor``
names (``#node``), draft-6/7 plain-name ``$id`` (``"$id": "#node"``), and
``$id``-identified subschemas (``"$ref": "address.json"``,
``"address.json#/$defs/street"``, a full URI), including pointers that are
relative to an embedded resource rather than to the document root.  What
names another document is refused: poot never fetches a schema.

``$dynamicRef`` becomes a ``$ref`` where its target cannot depend on the path
that reached it (a compiled schema has no dynamic scope to consult): when its
static target is no ``$dynamicAnchor``, when the root resource declares the
name (the root is always the outermost scope, so it wins), or when a single
subschema declares it.  Otherwise it stays, and the compiler refuses it.
``$recursiveRef: "#"`` (2019-09) likewise: the root of its own resource when
that has no ``"$recursiveAnchor": true``, the document's root when every
resource has one (the chain of anchored resources then always reaches the
outermost scope, the root); otherwise the compiler refuses it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urldefrag, urljoin

from poot_vllm.core.errors import ConstraintSyntaxError, UnsupportedConstruct


def _refusal(ref: str, where: str, reason: str) -> UnsupportedConstruct:
    where = where or "/$ref"
    err = UnsupportedConstruct(f"unsupported keyword '$ref' at {where}: {reason} (got {ref!r})")
    err.keyword = "$ref"  # type: ignore[attr-defined]
    err.pointer = where  # type: ignore[attr-defined]
    return err


#: :func:`local_refs` writes this before a ``#...`` reference made inside a subschema whose ``$id`` two
#: subschemas declare: it cannot tell which resource the reference is relative to.
AMBIGUOUS_BASE = "poot-ambiguous-base:"


def ref_to_pointer(ref: Any, where: str) -> str:
    """The JSON pointer (``""`` for the root) that a local ``$ref`` names."""
    if not isinstance(ref, str):
        raise ConstraintSyntaxError(f"'$ref' at {where} must be a string, got {type(ref).__name__}")
    if ref.startswith(AMBIGUOUS_BASE):
        raise _refusal(ref[len(AMBIGUOUS_BASE):], where, "it is relative to an '$id' that two subschemas declare; "
                                                       "give each subschema its own '$id'")
    if not ref.startswith("#"):
        raise _refusal(ref, where, "an external reference: it names another document (no subschema here has "
                                   "that '$id'); poot resolves local references only and never fetches schemas: "
                                   "inline the schema under '$defs' with that '$id'")
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        raise _refusal(ref, where, f"no subschema declares '$anchor': {fragment!r} (or declares it twice); "
                                   "declare it once, or use a JSON pointer like '#/$defs/Name'")
    return fragment


def pointer_tokens(pointer: str) -> list[str]:
    """Split a JSON pointer into its unescaped reference tokens."""
    if not pointer:
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def resolve_pointer(root: Any, pointer: str, where: str) -> Any:
    """The value at ``pointer`` inside ``root``; refuses a pointer that names nothing."""
    node = root
    for token in pointer_tokens(pointer):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise ConstraintSyntaxError(f"'$ref' at {where} points to '#{pointer}', which does not exist in the schema")
    return node


def _refs_in(node: Any, out: list[str]) -> None:
    """Every local ``$ref`` string in ``node``'s subtree (iterative: schemas may nest deeply)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                out.append(unquote(ref[1:]))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def cyclic_targets(root: Any) -> tuple[str, ...]:
    """The pointers of the schemas that can reach themselves through ``$ref``
    (a tree node, a linked list, a JSON-like value union), sorted.

    An over-approximation is harmless (the compiler only keys its cache finer);
    references that name nothing are left for the compiler to report.
    """
    root = local_refs(root)
    edges: dict[str, list[str]] = {}
    todo = [""]
    while todo:
        target = todo.pop()
        if target in edges:
            continue
        try:
            node = resolve_pointer(root, target, "")
        except ConstraintSyntaxError:
            edges[target] = []
            continue
        found: list[str] = []
        _refs_in(node, found)
        edges[target] = sorted(set(found))
        todo.extend(t for t in edges[target] if t not in edges)
    cyclic = []
    for start in edges:
        seen: set[str] = set()
        stack = list(edges[start])
        while stack:
            t = stack.pop()
            if t == start:
                cyclic.append(start)
                break
            if t in seen:
                continue
            seen.add(t)
            stack.extend(edges.get(t, ()))
    return tuple(sorted(cyclic))


#: The base URI of a document without ``$id`` (RFC 3986 needs an absolute base to resolve against;
#: the ``.invalid`` host names nothing that could ever be fetched).
DEFAULT_BASE = "https://poot.invalid/schema.json"
#: Keywords whose value is one schema, a list of schemas, or a map of name -> schema: the
#: places where ``$id`` and ``$anchor`` identify subschemas (values of other keywords are data).
_ONE_SCHEMA = ("additionalProperties", "additionalItems", "unevaluatedProperties", "unevaluatedItems", "contains",
               "propertyNames", "not", "if", "then", "else", "items", "contentSchema")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_OLD_DRAFTS = ("draft-03", "draft-04", "draft-05", "draft-06", "draft-07")


def escape_token(token: str) -> str:
    """``token`` as one JSON-pointer segment (``~`` and ``/`` escaped)."""
    return token.replace("~", "~0").replace("/", "~1")


def local_refs(root: Any) -> Any:
    """``root`` with every ``$ref`` written as a JSON pointer from the document root.

    Returns ``root`` itself when it has no ``$id``/``$anchor`` and only pointer
    references (the common case: Pydantic, zod, the OpenAI SDK); otherwise a
    copy in which only the rewritten ``$ref`` values differ.  References the
    document cannot answer are left as they are, for :func:`ref_to_pointer` to
    refuse with the reason.

    Draft-07 and older (``$schema`` says so): an ``$id`` beside a ``$ref`` is
    ignored, as those drafts ignore every sibling of ``$ref``; draft-04's
    ``id`` is its ``$id``.
    """
    if not isinstance(root, dict) or isinstance(root, _Rewritten) or not _needs_rewrite(root):
        return root
    schema_uri = root.get("$schema", "")
    old = isinstance(schema_uri, str) and any(d in schema_uri for d in _OLD_DRAFTS)
    id_key = "id" if isinstance(schema_uri, str) and ("draft-04" in schema_uri or "draft-03" in schema_uri) else "$id"
    resources: dict[str, str] = {}  # base URI (no fragment) -> pointer of the resource's root
    anchors: dict[tuple[str, str], str] = {}  # (base URI, anchor name) -> pointer
    ambiguous: set[Any] = set()
    refs: list[tuple[str, str, str]] = []  # (pointer of the schema holding $ref, its base URI, the $ref)
    dynamic_refs: list[tuple[str, str, str]] = []  # the same for $dynamicRef
    recursive_refs: list[tuple[str, str, str]] = []  # ... and for $recursiveRef (2019-09)
    dynamic: dict[str, set[tuple[str, str]]] = {}  # $dynamicAnchor name -> {(base URI, pointer)}

    def define(table: dict, key: Any, pointer: str) -> None:
        if key in table and table[key] != pointer:
            ambiguous.add(key)
        table[key] = pointer

    root_base = DEFAULT_BASE  # the root resource's URI (its $id, if any, applied below)
    stack: list[tuple[Any, str, str]] = [(root, "", DEFAULT_BASE)]
    define(resources, DEFAULT_BASE, "")
    while stack:
        node, pointer, base = stack.pop()
        if not isinstance(node, dict):
            continue
        ident = node.get(id_key)
        if isinstance(ident, str) and not (old and "$ref" in node):
            if ident.startswith("#"):
                if ident[1:]:
                    define(anchors, (base, ident[1:]), pointer)  # draft-6/7 plain-name $id
            else:
                uri, fragment = urldefrag(urljoin(base, ident))
                base = uri
                define(resources, base, pointer)
                if fragment:
                    define(anchors, (base, fragment), pointer)
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                define(anchors, (base, node[key]), pointer)
        if isinstance(node.get("$dynamicAnchor"), str):
            dynamic.setdefault(node["$dynamicAnchor"], set()).add((base, pointer))
        if isinstance(node.get("$ref"), str):
            refs.append((pointer, base, node["$ref"]))
        if isinstance(node.get("$dynamicRef"), str):
            dynamic_refs.append((pointer, base, node["$dynamicRef"]))
        if isinstance(node.get("$recursiveRef"), str):
            recursive_refs.append((pointer, base, node["$recursiveRef"]))
        if not pointer:
            root_base = base
        for key in _ONE_SCHEMA:
            if isinstance(node.get(key), dict):
                stack.append((node[key], f"{pointer}/{escape_token(key)}", base))
        for key in _SCHEMA_LISTS:
            if isinstance(node.get(key), list):
                stack.extend((sub, f"{pointer}/{escape_token(key)}/{i}", base) for i, sub in enumerate(node[key]))
        for key in SCHEMA_MAPS:
            if isinstance(node.get(key), dict):
                stack.extend((sub, f"{pointer}/{escape_token(key)}/{escape_token(name)}", base)
                             for name, sub in node[key].items() if isinstance(sub, dict))

    def static_target(base: str, ref: str) -> tuple[str | None, str, str]:
        """(the pointer ``ref`` names, or None with the reason in ``ref_to_pointer``'s hands; its
        document URI; its fragment)."""
        # urljoin leaves a bare fragment unresolved against non-hierarchical bases (urn:...)
        uri, fragment = (base, ref[1:]) if ref.startswith("#") else urldefrag(urljoin(base, ref))
        fragment = unquote(fragment)
        if uri not in resources or uri in ambiguous:
            return None, uri, fragment  # another document (or one named twice): ref_to_pointer refuses it
        if fragment.startswith("/") or not fragment:
            return resources[uri] + fragment, uri, fragment
        if (uri, fragment) in anchors and (uri, fragment) not in ambiguous:
            return anchors[(uri, fragment)], uri, fragment
        return None, uri, fragment

    rewrites: dict[str, dict[str, Any]] = {}  # pointer -> {key: new value, or None to drop the key}
    for pointer, base, ref in refs:
        if ref.startswith("#") and base in ambiguous:
            rewrites[pointer] = {"$ref": AMBIGUOUS_BASE + ref}  # read from the root it would name the wrong schema
            continue
        target, _, _ = static_target(base, ref)
        if target is None:
            continue
        new = _as_ref(target)
        if new != ref:
            rewrites[pointer] = {"$ref": new}
    dynamic_targets = [(pointer, base, ref, "$dynamicRef") for pointer, base, ref in dynamic_refs]
    # $recursiveRef "#" (2019-09): the root of its resource, unless that has "$recursiveAnchor": true;
    # then the outermost resource of the dynamic scope reached through resources that all have it.
    # Path-independent when every resource of the document has it: the root (always outermost).
    def anchored(pointer: str) -> bool:
        node = resolve_pointer(root, pointer, "")
        return isinstance(node, dict) and node.get("$recursiveAnchor") is True

    every_anchored = all(anchored(p) for p in resources.values())
    for pointer, base, ref in recursive_refs:
        if ref != "#":
            continue  # the compiler refuses it (2019-09 allows only "#")
        start, _, _ = static_target(base, "#")
        if start is None:
            continue
        if anchored(start):
            if not every_anchored:
                continue  # the compiler refuses the $recursiveRef
            start = resources[root_base]
        dynamic_targets.append((pointer, base, start, "$recursiveRef"))  # (a pointer from the root)
    for pointer, base, ref, keyword in dynamic_targets:
        if keyword == "$recursiveRef":
            target, uri, fragment = ref, "", ""
        else:
            target, uri, fragment = static_target(base, ref)
        if target is None:
            continue  # the compiler refuses the $dynamicRef
        if keyword == "$dynamicRef" and fragment and not fragment.startswith("/") \
                and (uri, target) in dynamic.get(fragment, ()):
            # The static target is a $dynamicAnchor: the outermost resource of the dynamic scope that
            # declares one with this name wins.  The root resource is always the outermost; a name
            # that one subschema alone declares has no rival.  Otherwise the target depends on the
            # path the evaluation took to get here, which a compiled schema cannot follow.
            declared = dynamic[fragment]
            at_root = [p for b, p in declared if b == root_base]
            if len(at_root) == 1:
                target = at_root[0]
            elif at_root or len(declared) > 1:
                continue  # the compiler refuses the $dynamicRef
        # a $ref is a JSON pointer now; one beside it (both apply) goes into allOf
        change: dict[str, Any] = {keyword: None}
        node = resolve_pointer(root, pointer, "")
        if "$ref" in node:
            change["allOf"] = [*node.get("allOf", []), {"$ref": _as_ref(target)}] \
                if isinstance(node.get("allOf", []), list) else None
            if change["allOf"] is None:
                continue
        else:
            change["$ref"] = _as_ref(target)
        rewrites.setdefault(pointer, {}).update(change)
    return _with_refs(root, rewrites) if rewrites else root


def _as_ref(pointer: str) -> str:
    return "#" + quote(pointer, safe="/~!$&'()*+,;=:@")


def _needs_rewrite(root: Any) -> bool:
    """Whether some ``$ref`` might not be a pointer from the document root."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if any(k in node for k in ("$id", "id", "$anchor", "$dynamicAnchor", "$dynamicRef", "$recursiveRef")):
                return True
            ref = node.get("$ref")
            if isinstance(ref, str) and not (ref == "#" or ref.startswith("#/")):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


class _Rewritten(dict):
    """A document :func:`local_refs` already rewrote: its pointers are from the root, so a second
    pass (which would read them relative to embedded ``$id`` resources again) must not run."""


def _with_refs(root: Any, rewrites: dict[str, dict[str, Any]]) -> Any:
    """A copy of ``root`` with the given keys replaced (``None``: removed) at the given pointers
    (dicts on the paths copied)."""
    copies: dict[str, Any] = {"": _Rewritten(root)}
    for pointer, change in rewrites.items():
        node, path = copies[""], ""
        for token in pointer_tokens(pointer):
            path += "/" + escape_token(token)
            if path not in copies:
                key: Any = int(token) if isinstance(node, list) else token
                copies[path] = node[key] = dict(node[key]) if isinstance(node[key], dict) else list(node[key])
            node = copies[path]
        for key, value in change.items():
            if value is None:
                node.pop(key, None)
            else:
                node[key] = value
    return copies[""]
