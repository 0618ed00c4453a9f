#!/usr/bin/env python3
"""Checks that the claims of the book's promise chapters name the tests that prove them.

A claim is a block of a chapter listed in CHAPTERS: a paragraph, a list item
(a nested item is a block of its own) or a table's body row. Not claims:
headings, fenced code, a table's header and delimiter rows, rules (`---`),
a paragraph that ends with `:` and leads into the code, table or list under
it, a block carrying `<!-- not a claim -->`, and every block of a section
whose heading is followed by `<!-- no claims: why -->` (up to the next heading
of the same or a higher level).

Every other block must carry at least one reference `[test: FILE::NAME]`
(several may share the brackets, comma-separated): FILE is `NAME.rs` for
the area tests/integration/NAME.rs of the integration binary (or
tests/NAME.rs, a binary of its own), or a path under src/ for a unit test,
and NAME a function
marked #[test] or #[tokio::test] in that file. A block about what Laravel
does rather than the worker may carry `<!-- laravel -->` instead: a fact read
from the framework's source, which no test here can run.

Exit status 1 with one line per unreferenced claim or unknown test, else 0.
Usage: python3 docs/check-claims.py [--list]   (from the repository root)
"""

import os
import re
import sys

CHAPTERS = [
    "docs/src/protocol.md",
    "docs/src/differences.md",
    "docs/src/reliability.md",
    "docs/src/sqs-queue.md",
    "docs/src/database-queue.md",
    "docs/src/beanstalkd-queue.md",
]
REFERENCE = re.compile(r"\[test: ([^\]]+)\]")
CITED = re.compile(r"`tests/(?:integration/)?([a-z0-9_]+\.rs::[A-Za-z0-9_]+)`")
NOT_A_CLAIM = "<!-- not a claim -->"
LARAVEL = "<!-- laravel -->"
NO_CLAIMS = re.compile(r"^<!-- no claims: .+ -->\s*$")
ITEM = re.compile(r"^(\s*)([-*]|\d+\.)\s+")
TEST_ATTRIBUTE = re.compile(r"^\s*#\[(?:tokio::)?test\b[^\]]*\]")
MACRO = re.compile(r"macro_rules!\s*([A-Za-z_]+)")
FUNCTION = re.compile(r"^\s*(?:pub\s+)?(?:async\s+)?fn\s+([A-Za-z0-9_]+)")


def test_functions():
    """{file as referenced: set of test names} for tests/*.rs,
    tests/integration/*.rs (referenced by file name alone) and src/**/*.rs."""
    found = {}
    sources = []
    for folder in ["tests", "tests/integration"]:
        sources += [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".rs")]
    for base, _, files in os.walk("src"):
        sources += [os.path.join(base, f) for f in files if f.endswith(".rs")]
    for path in sources:
        key = os.path.basename(path) if path.startswith("tests/") else path
        with open(path, encoding="utf-8") as source:
            text = source.read()
        found[key] = marked_tests(text) | macro_tests(text)
    return found


def marked_tests(text):
    """The functions right under a test attribute."""
    names, armed = set(), False
    for line in text.split("\n"):
        if TEST_ATTRIBUTE.match(line):
            armed = True
            continue
        match = FUNCTION.match(line)
        if match and armed:
            names.add(match.group(1))
        if match or not line.strip().startswith("#["):
            armed = armed and not match and not line.strip()
    return names


def macro_tests(text):
    """The tests a `macro_rules!` of the file makes (`#[test] fn $name`),
    named in its invocations: the identifiers in the places of the
    metavariables that name a test."""
    names = set()
    for macro in MACRO.finditer(text):
        body = text[macro.end():macro.end() + 2000]
        variables = re.findall(r"\$([A-Za-z_]+):([a-z]+)", body.split("=>", 1)[0])
        made = set(re.findall(r"#\[test\]\s*fn \$([A-Za-z_]+)", body))
        if not made:
            continue
        call = re.search(re.escape(macro.group(1)) + r"!\s*[{(](.*?)\n[})]", text, re.S)
        if not call:
            continue
        words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", call.group(1))
        if all(kind == "ident" for _, kind in variables) and variables:
            places = [i for i, (name, _) in enumerate(variables) if name in made]
            width = len(variables)
            names |= {w for i, w in enumerate(words) if i % width in places}
        else:
            names |= set(words)
    return names


def blocks(lines):
    """Yields (first line, last line, text, exempt) for every block of a chapter."""
    fenced = False
    current, start, exempt_level = [], 0, None
    table_row = 0

    def flush():
        nonlocal current
        if current:
            yield start, start + len(current) - 1, "\n".join(current)
        current = []

    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            yield from ((s, e, t, exempt_level is not None) for s, e, t in flush())
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = re.match(r"^(#+)\s", line)
        if heading:
            yield from ((s, e, t, exempt_level is not None) for s, e, t in flush())
            level = len(heading.group(1))
            if exempt_level is not None and level <= exempt_level:
                exempt_level = None
            following = lines[number] if number < len(lines) else ""
            if exempt_level is None and NO_CLAIMS.match(following.strip()):
                exempt_level = level
            continue
        if not stripped or stripped == "---" or NO_CLAIMS.match(stripped):
            yield from ((s, e, t, exempt_level is not None) for s, e, t in flush())
            table_row = 0
            continue
        if stripped.startswith("|"):
            yield from ((s, e, t, exempt_level is not None) for s, e, t in flush())
            table_row += 1
            if table_row > 2:
                yield number, number, stripped, exempt_level is not None
            continue
        if ITEM.match(line):
            yield from ((s, e, t, exempt_level is not None) for s, e, t in flush())
            start = number
        elif not current:
            start = number
        current.append(stripped)
    yield from ((s, e, t, exempt_level is not None) for s, e, t in flush())


def leads_in(text):
    """A paragraph or list item ending with `:` (bold or not): it introduces
    the code, table or list under it, whose blocks carry the claims."""
    return text.rstrip().rstrip("*").endswith(":")


def check(path, tests, listing):
    """The problems of one chapter, and its counts."""
    with open(path, encoding="utf-8") as chapter:
        lines = chapter.read().split("\n")
    problems, counts = [], {"referenced": 0, "laravel": 0, "not a claim": 0}
    for number, _, text, exempt in blocks(lines):
        references = REFERENCE.findall(text)
        for cited in CITED.findall(text):
            file, _, name = cited.partition("::")
            if name not in tests.get(file, ()):
                problems.append(f"{path}:{number}: no test {cited}")
        for group in references:
            for reference in (r.strip() for r in group.split(",")):
                file, _, name = reference.partition("::")
                if name not in tests.get(file, ()):
                    problems.append(f"{path}:{number}: no test {reference}")
        if references:
            counts["referenced"] += 1
        elif LARAVEL in text:
            counts["laravel"] += 1
        elif exempt or NOT_A_CLAIM in text or leads_in(text):
            counts["not a claim"] += 1
        else:
            shown = " ".join(text.split())[:70]
            problems.append(f"{path}:{number}: a claim without [test: …]: {shown}")
        if listing:
            shown = " ".join(text.split())[:90]
            print(f"{path}:{number}: {'ok' if references else '--'} {shown}")
    return problems, counts


def main():
    tests = test_functions()
    listing = "--list" in sys.argv
    problems = []
    for path in CHAPTERS:
        found, counts = check(path, tests, listing)
        problems += found
        summary = ", ".join(f"{n} {what}" for what, n in counts.items())
        print(f"claims: {path}: {summary}")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"claims: {len(problems)} problem(s) (above)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
