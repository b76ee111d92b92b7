"""MkDocs hooks (mkdocs.yml `hooks:`): the README is the site's home page, and links to files
of the repository outside docs/ (helm-values/, examples/) become plain text naming the file,
since the site does not carry them (or links into `repo_url` when mkdocs.yml sets one)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")  # links and images


def on_page_markdown(markdown, page, config, files):
    page_dir = posixpath.dirname(page.file.src_uri)
    if page.file.src_uri == "index.md":
        markdown = (ROOT / "README.md").read_text(encoding="utf-8")
        source_dir = ""                      # README's links are relative to the repository root
    else:
        source_dir = posixpath.join("docs", page_dir) if page_dir else "docs"
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def fix(match):
        bang, text, target = match.groups()
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        path, sep, anchor = target.partition("#")
        in_repo = posixpath.normpath(posixpath.join(source_dir, path))
        if in_repo.startswith("docs/"):      # a page of the site
            here = posixpath.join("docs", page_dir) if page_dir else "docs"
            return f"{bang}[{text}]({posixpath.relpath(in_repo, here)}{sep}{anchor})"
        if repo_url:
            return f"{bang}[{text}]({repo_url}/blob/main/{in_repo}{sep}{anchor})"
        return text if text.strip("`") == in_repo else f"{text} (`{in_repo}`)"

    return LINK.sub(fix, markdown)
