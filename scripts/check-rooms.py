#!/usr/bin/env python3
"""Rooms: no Swift file under Services/*Core over 450 lines, and no function,
initializer or subscript there over 60 lines (from its first line to its closing
brace). Run by scripts/lint.sh; prints each offender and exits 1."""
import glob
import re
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 60
DECLARATION = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*"
    r"(?:(?:public|private|fileprivate|internal|package|static|class|final|override|mutating|"
    r"nonisolated|convenience|required)\s+)*(?:func|init|deinit|subscript)\b"
)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def code(line):
    """The line without string literals and its trailing comment."""
    return STRING.sub('""', line).split("//")[0]


def long_functions(lines):
    """(first line, length, declaration) of each function over the limit."""
    found = []
    for start, line in enumerate(lines):
        if line.lstrip().startswith("//") or not DECLARATION.match(line):
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            text = code(lines[end])
            if not opened and end > start and text.strip() == "":
                break  # a protocol requirement: no body
            for ch in text:
                if ch == "{":
                    depth += 1
                    opened = True
                elif ch == "}":
                    depth -= 1
            if opened and depth <= 0:
                length = end - start + 1
                if length > MAX_FUNCTION_LINES:
                    found.append((start + 1, length, line.strip()[:90]))
                break
    return found


def main():
    failures = []
    for path in sorted(glob.glob("Services/*Core/**/*.swift", recursive=True)):
        lines = open(path, encoding="utf-8").read().split("\n")
        if len(lines) - 1 > MAX_FILE_LINES:
            failures.append(f"{path}: {len(lines) - 1} lines (at most {MAX_FILE_LINES})")
        for first, length, declaration in long_functions(lines):
            failures.append(f"{path}:{first}: {length} lines (at most {MAX_FUNCTION_LINES}): {declaration}")
    for failure in failures:
        print(failure)
    if failures:
        sys.exit(1)
    print("rooms: every file under Services/*Core within 450 lines, every function within 60")


if __name__ == "__main__":
    main()
