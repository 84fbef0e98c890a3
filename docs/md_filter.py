#!/usr/bin/env python3
"""Doxygen's INPUT_FILTER for the kit's Markdown pages (docs/Doxyfile.in): Doxygen 1.9.4 knows no
GitHub-style heading anchors, so a link to one would be a warning (an error in the site's build).
Same-page links `[text](#anchor)` become their text, links to another page's anchor
`[text](page.md#anchor)` link to the page. Code (fenced blocks, `spans`) is left alone."""
import re
import sys

SAME_PAGE = re.compile(r"\[([^\]]+)\]\(#[^)\s]+\)")
OTHER_PAGE = re.compile(r"\]\(([^)#\s]+\.md)#[^)\s]+\)")


def prose(text: str) -> str:
    return OTHER_PAGE.sub(r"](\1)", SAME_PAGE.sub(r"\1", text))


def main() -> None:
    out, fenced = [], False
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                out.append(line)
                continue
            if fenced:
                out.append(line)
                continue
            # Odd pieces between backticks are code spans on this line.
            parts = line.split("`")
            out.append("`".join(prose(p) if i % 2 == 0 else p for i, p in enumerate(parts)))
    sys.stdout.write("".join(out))


if __name__ == "__main__":
    main()
