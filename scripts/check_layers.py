#!/usr/bin/env python3
"""The layer map of docs/architecture.md, checked against the tree.

docs/architecture.md's table under "### Who may use whom" lists each layer:
its folder under src/, its public headers in include/duet/, and the layers
it may use. This script fails (exit 1, one line per problem, file:line) when
- a folder under src/ is no layer of the table, or a layer's folder is gone;
- a file includes a header of a layer it may not use (`#include "x/..."`
  for the layers' own headers under src/, `#include "duet/x.h"` for the
  public ones);
- a file includes another folder's private header (a name ending in
  `_internal.h`: private to its own folder; the white-box tests are the
  only other users, and tests are not checked here);
- a public header in include/duet/ belongs to no layer.

Usage: scripts/check_layers.py [ROOT]   (ROOT: the repository, default ..)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), ".."))
MAP = os.path.join(ROOT, "docs", "architecture.md")


def read_table():
    """{layer: (folder, [public headers], [may use])} from the map."""
    with open(MAP, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "### Who may use whom")
    except StopIteration:
        sys.exit(f"{MAP}: no '### Who may use whom' section: the layer map is gone")
    rows = {}
    for i in range(start + 1, len(lines)):
        l = lines[i].strip()
        if l.startswith("#"):
            break
        if not l.startswith("|") or set(l) <= set("|-: "):
            continue
        cells = [c.strip().strip("`") for c in l.strip("|").split("|")]
        if len(cells) != 4 or cells[0] == "layer":
            continue
        layer, folder, headers, uses = cells
        split = lambda s: [x.strip().strip("`") for x in s.split(",") if x.strip() not in ("", "-")]
        rows[layer] = (folder.rstrip("/"), split(headers), split(uses), i + 1)
    if not rows:
        sys.exit(f"{MAP}: the '### Who may use whom' table has no rows")
    return rows


def main():
    rows = read_table()
    problems = []
    folder_of = {}  # src folder name -> layer
    for layer, (folder, _, _, line) in rows.items():
        if not folder.startswith("src/") and folder != "tools":
            problems.append(f"docs/architecture.md:{line}: layer {layer}: folder {folder} is not under src/")
            continue
        if not os.path.isdir(os.path.join(ROOT, folder)):
            problems.append(f"docs/architecture.md:{line}: layer {layer}: folder {folder} does not exist")
        folder_of[folder[len("src/"):] if folder.startswith("src/") else folder] = layer
    header_layer = {}
    for layer, (_, headers, _, line) in rows.items():
        for h in headers:
            header_layer[os.path.basename(h)] = layer
    for name in sorted(os.listdir(os.path.join(ROOT, "src"))):
        if os.path.isdir(os.path.join(ROOT, "src", name)) and name not in folder_of:
            problems.append(f"src/{name}/: no layer of docs/architecture.md's map holds this folder")
    for name in sorted(os.listdir(os.path.join(ROOT, "include", "duet"))):
        if name.endswith(".h") and name not in header_layer:
            problems.append(f"include/duet/{name}: no layer of docs/architecture.md's map owns this header")
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for top, layer in sorted(folder_of.items()):
        folder, _, uses, _ = rows[layer]
        allowed = set(uses) | {layer}
        base = os.path.join(ROOT, folder)
        for dirpath, _, files in os.walk(base):
            for fn in sorted(files):
                if not fn.endswith((".c", ".h", ".cu")):
                    continue
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, text in enumerate(f, 1):
                        m = inc.match(text)
                        if not m:
                            continue
                        target = m.group(1)
                        if "/" not in target:
                            continue  # generated headers (duet_git.h) and local includes
                        head, tail = target.split("/", 1)
                        if head == "duet":
                            owner = header_layer.get(tail)
                            if owner is None:
                                problems.append(f"{rel}:{n}: includes {target}, which no layer owns")
                            elif owner not in allowed:
                                problems.append(f"{rel}:{n}: layer {layer} includes {target} "
                                                f"(layer {owner}); {layer} may use: {', '.join(sorted(uses)) or 'nothing'}")
                            continue
                        owner = folder_of.get(head)
                        if owner is None:
                            problems.append(f"{rel}:{n}: includes {target}: src/{head}/ is no layer")
                            continue
                        if owner != layer and owner not in allowed:
                            problems.append(f"{rel}:{n}: layer {layer} includes {target} "
                                            f"(layer {owner}); {layer} may use: {', '.join(sorted(uses)) or 'nothing'}")
                        if tail.endswith("_internal.h") and os.path.dirname(os.path.relpath(path, os.path.join(ROOT, "src"))).split("/")[0] != head:
                            problems.append(f"{rel}:{n}: includes {target}, private to src/{head}/ "
                                            f"(its header for other layers is the one without _internal)")
    # The public headers: each may include only the public headers of the
    # layers its own layer may use.
    for name in sorted(os.listdir(os.path.join(ROOT, "include", "duet"))):
        layer = header_layer.get(name)
        if layer is None or not name.endswith(".h"):
            continue
        allowed = set(rows[layer][2]) | {layer}
        with open(os.path.join(ROOT, "include", "duet", name), encoding="utf-8") as f:
            for n, text in enumerate(f, 1):
                m = inc.match(text)
                if m and m.group(1).startswith("duet/"):
                    owner = header_layer.get(m.group(1)[len("duet/"):])
                    if owner is not None and owner not in allowed:
                        problems.append(f"include/duet/{name}:{n}: layer {layer}'s header includes "
                                        f"{m.group(1)} (layer {owner})")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s) against docs/architecture.md's map")
        return 1
    print(f"check_layers: {len(rows)} layers, every include within the map")
    return 0


if __name__ == "__main__":
    sys.exit(main())
