#!/usr/bin/env python3
"""Lists the longest functions of the operator's non-test Rust code.

Usage: scripts/longest-functions.py [--most N] [DIR...]   (default: the controllers and ingot src)

A function runs from its `fn` line to the brace that closes its body; `#[cfg(test)]` modules
and files under tests/ are left out. Counts lines as written, comments and blank lines included.
"""
import re
import sys
from pathlib import Path

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def strip_strings(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//", 1)[0]


def functions(path):
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "#[cfg(test)]":
            # Skip the test module that follows.
            j = i + 1
            while j < len(lines) and "{" not in lines[j]:
                j += 1
            depth = 0
            while j < len(lines):
                s = strip_strings(lines[j])
                depth += s.count("{") - s.count("}")
                j += 1
                if depth <= 0:
                    break
            i = j
            continue
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            s = strip_strings(lines[j])
            if not opened and ";" in s and "{" not in s:
                break  # a declaration without a body
            depth += s.count("{") - s.count("}")
            opened = opened or "{" in s
            if opened and depth <= 0:
                yield (j - i + 1, f"{path}:{i + 1}", m.group(6))
                break
            j += 1
        i += 1


def main(argv):
    most = 10
    if argv[:1] == ["--most"]:
        most, argv = int(argv[1]), argv[2:]
    roots = argv or ["crates/controllers/src", "crates/ingot/src"]
    found = []
    for root in roots:
        for path in sorted(Path(root).rglob("*.rs")):
            if "tests" in path.parts or path.name == "tests.rs":
                continue
            found.extend(functions(path))
    found.sort(reverse=True)
    for length, where, name in found[:most]:
        print(f"{length:5}  {name:40} {where}")
    print(f"functions over 80 lines: {sum(1 for f in found if f[0] > 80)}")


if __name__ == "__main__":
    main(sys.argv[1:])
