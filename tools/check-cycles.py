#!/usr/bin/env python3
"""Finds import cycles between the source files of a Rust crate.

Every file under SRC (default: src) is a module. A file depends on another
when it names an item of it: `use crate::a::b::Item`, `use super::x::Item`,
`self::`, or the same paths written inline (`crate::a::f()`). A path is
resolved to the deepest module file it names, and a name that the module only
re-exports (`pub use other::Item`) is followed to where it is defined, so a
parent `mod.rs` that re-exports its children's items does not count as
depending on a child that uses the parent's own items. `mod child;` itself is
no dependency. A child naming its own ancestor's items (`use super::Error`
in `config/load.rs` for `config/mod.rs`'s type) is part of that ancestor, as
Rust's privacy makes it, and is not counted either: what is counted are
circles between siblings (`engine/pipeline.rs` <-> `engine/batch.rs`) and
between folders. `--strict` counts those child-to-ancestor uses as well.
Prints each cycle (strongly connected set of files) and exits 1 when there
is one, 0 when the graph has none.

  tools/check-cycles.py [--strict] [-v] [SRC]     # -v: print every edge
"""

import os
import re
import sys

ITEM = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|async\s+|const\s+)*(?:fn|struct|enum|trait|type|const|static|union|mod)\s+([A-Za-z_][A-Za-z0-9_]*)", re.M)
MACRO = re.compile(r"macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)")
USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
INLINE = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def module_files(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if rel and rel[0] == "bin":
                continue
            mods[tuple(rel)] = os.path.join(root, f)
    return mods


def strip_comments_and_tests(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # #[cfg(test)] mod tests { ... }: tests may reach anywhere in the crate.
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if m:
        text = text[: m.start()]
    return text


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (aliases dropped)."""
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree.strip())
    out = []

    def rec(prefix, t):
        if "{" not in t:
            for part in split_top(t):
                out.append(prefix + part.split(" as ")[0].strip())
            return
        i = t.index("{")
        head, body = t[:i], t[i + 1 : t.rindex("}")]
        for part in split_top(body):
            rec(prefix + head, part)

    rec("", tree)
    return out


def split_top(t):
    parts, depth, cur = [], 0, ""
    for ch in t:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    verbose = "-v" in sys.argv
    strict = "--strict" in sys.argv
    src = args[0] if args else "src"
    mods = module_files(src)
    texts = {m: strip_comments_and_tests(open(f).read()) for m, f in mods.items()}
    defined = {m: set(ITEM.findall(t)) | set(MACRO.findall(t)) for m, t in texts.items()}
    reexports = {}
    for m, t in texts.items():
        r = {}
        for tree in re.findall(r"^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", t, re.M):
            for path in expand_use(tree):
                name = path.split("::")[-1]
                if name not in ("*", "self"):
                    r[name] = path
        reexports[m] = r

    def absolute(m, path):
        parts = path.split("::")
        if parts[0] == "crate":
            base, parts = [], parts[1:]
        elif parts[0] in ("self", "super"):
            base = list(m)
            while parts and parts[0] in ("self", "super"):
                if parts[0] == "super":
                    base = base[:-1]
                parts = parts[1:]
        else:
            # A path from a name in scope (`use x::y` where x is a child module).
            if (*m, parts[0]) in mods:
                base = list(m)
            else:
                return None
        return base + parts

    def resolve(parts, seen=0):
        """The file that defines the item `parts` names (or the module itself)."""
        for n in range(len(parts), -1, -1):
            mod = tuple(parts[:n])
            if mod in mods:
                rest = parts[n:]
                if not rest or rest[0] in defined[mod] or rest[0] in ("*", "self") or seen > 8:
                    return mod
                target = reexports[mod].get(rest[0])
                if target is None:
                    return mod
                abs_target = absolute(mod, target)
                if abs_target is None:
                    return mod
                return resolve(abs_target + rest[1:], seen + 1)
        return None

    edges = {m: set() for m in mods}
    for m, t in texts.items():
        paths = []
        for tree in USE.findall(t):
            paths.extend(expand_use(tree))
        paths.extend(INLINE.findall(t))
        for path in paths:
            parts = absolute(m, path)
            if parts is None:
                continue
            target = resolve(parts)
            if target is None or target == m:
                continue
            if not strict and m[: len(target)] == target:
                continue  # a child using its ancestor's items
            edges[m].add(target)

    name = lambda m: "::".join(m) or "crate"
    if verbose:
        for m in sorted(edges):
            for d in sorted(edges[m]):
                print(f"{name(m)} -> {name(d)}")

    # Tarjan's strongly connected components.
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(mods):
        if v not in index:
            strong(v)
    if not sccs:
        print(f"no import cycles among {len(mods)} files in {src} ({sum(len(e) for e in edges.values())} dependencies)")
        return 0
    for comp in sccs:
        inside = set(comp)
        print("cycle: " + ", ".join(name(m) for m in comp))
        for m in comp:
            for d in sorted(edges[m] & inside):
                print(f"  {name(m)} -> {name(d)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
