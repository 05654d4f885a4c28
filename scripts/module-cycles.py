#!/usr/bin/env python3
"""Fails when two source files of one crate use each other (a file cycle): each file's job should
depend on the files below it, never back up. Reads `crate::…` and `super::…` paths outside
#[cfg(test)] code; a module and its own submodules do not count."""
import glob
import os
import re
import sys

found = []
for crate in sorted(glob.glob("crates/*/src")):
    files = {}
    for path in glob.glob(crate + "/**/*.rs", recursive=True):
        rel = os.path.relpath(path, crate)[:-3]
        module = rel.removesuffix("/mod").replace("/", "::")
        files["" if module in ("lib", "main") else module] = open(path).read()
    deps = {m: set() for m in files}
    for module, text in files.items():
        text = text.split("#[cfg(test)]")[0]
        for kind, path in re.findall(r"\b(crate|super)((?:::[a-z_0-9]+)+)", text):
            parts = path.strip(":").split("::")
            base = [] if kind == "crate" or not module else module.split("::")[:-1]
            candidate = base + parts
            while candidate:
                target = "::".join(candidate)
                if target in files and target != module:
                    deps[module].add(target)
                    break
                candidate = candidate[:-1]
    for a in deps:
        for b in deps[a]:
            nested = b.startswith(a + "::") or a.startswith(b + "::")
            if a < b and a in deps.get(b, ()) and not nested:
                found.append(f"{crate}: {a} <-> {b}")
for line in found:
    print("file cycle:", line)
sys.exit(1 if found else 0)
