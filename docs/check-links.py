#!/usr/bin/env python3
"""Checks the links of the built book (docs/book, after `mdbook build docs`).

Every relative link (href or src) in every HTML page must name a file of the
book, and every #fragment an id (or a named anchor) in the page it points at.
External links (http:, https:, mailto:) are only counted, never fetched: CI
has no network. Exit status 1 with one line per broken link, else 0.

Usage: python3 docs/check-links.py [BOOK_DIR]
"""

import html.parser
import os
import sys
import urllib.parse

EXTERNAL = ("http:", "https:", "mailto:", "ftp:", "data:", "javascript:")


class Page(html.parser.HTMLParser):
    """The ids and links of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []  # (attribute, value, line)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            elif name in ("href", "src") and tag != "base":
                self.links.append((name, value, self.getpos()[0]))

    handle_startendtag = handle_starttag


def parse(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    page.close()
    return page


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "book"))
    if not os.path.isfile(os.path.join(root, "index.html")):
        print(f"{root}: no index.html (run `mdbook build docs` first)", file=sys.stderr)
        return 1
    pages = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                pages[path] = parse(path)

    broken = []
    checked = external = 0
    for path, page in sorted(pages.items()):
        for attr, value, line in page.links:
            value = value.strip()
            if value.lower().startswith(EXTERNAL) or value.startswith("//"):
                external += 1
                continue
            checked += 1
            url = urllib.parse.urlsplit(value)
            where = f"{os.path.relpath(path, root)}:{line}: {attr}={value!r}"
            if url.path:
                if url.path.startswith("/"):
                    broken.append(f"{where}: an absolute path does not work from a file or a sub-path")
                    continue
                target = os.path.normpath(
                    os.path.join(os.path.dirname(path), urllib.parse.unquote(url.path)))
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
                if not target.startswith(root + os.sep) and target != root:
                    broken.append(f"{where}: points outside the book")
                    continue
                if not os.path.exists(target):
                    broken.append(f"{where}: no such file")
                    continue
            else:
                target = path
            if url.fragment:
                fragment = urllib.parse.unquote(url.fragment)
                if target not in pages:
                    if target.endswith(".html"):
                        pages[target] = parse(target)
                    else:
                        continue
                if fragment not in pages[target].ids:
                    broken.append(f"{where}: no id {fragment!r} in {os.path.relpath(target, root)}")

    for line in broken:
        print(line, file=sys.stderr)
    print(f"check-links: {len(pages)} pages, {checked} relative links checked, "
          f"{external} external links not fetched, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
