"""The Markdown documents cite only what the repository holds.

Checked in every ``*.md`` under docs/ and in README.md and CHANGELOG.md:

* relative link targets (``[text](target)``, ``![alt](target)``, ``[ref]: target``; not http, https
  or mailto), resolved against the document's folder, with the fragment stripped;
* the fragment of a link into a Markdown file (or of a ``#fragment`` link within the document): a
  heading of that file under GitHub's slug rules (:func:`slug`);
* path-like mentions of repository files in the text and in code (``tools/...``, ``src/...``,
  ``tests/...``, ``csrc/...``, ``docs/...``, ``scripts/...``), resolved against the repository root,
  and mentions that start with ``../``, resolved against the document's folder, which must also stay
  inside the repository. A mention with ``*`` must match at least one path.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)
ROOTS = ("scripts", "tools", "src", "tests", "csrc", "docs")
# a mention starts where no path character precedes it (not inside a URL or a longer path)
PATH_MENTION = re.compile(r"(?<![\w./~$-])((?:\.\./)+[\w.*-][\w.*/-]*|(?:%s)/[\w.*/-]*)" % "|".join(ROOTS))
EXTERNAL = ("http://", "https://", "mailto:")


def strip_code(text: str) -> str:
    """``text`` without fenced code blocks and code spans (where ``[a](b)`` is not a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def link_targets(text: str) -> list[str]:
    """Targets of the inline and reference-style links outside code, as written (``<...>`` unwrapped)."""
    prose = strip_code(text)
    found = INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)
    return [t[1:-1] if t.startswith("<") else t for t in found]


def path_mentions(text: str) -> list[str]:
    """Path-like mentions (:data:`PATH_MENTION`), code included, trailing sentence punctuation dropped."""
    return [m.rstrip(".") for m in PATH_MENTION.findall(text) if m.rstrip(".")]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text (code spans, links and emphasis reduced to their
    text), lower-cased, every character other than a letter, mark, digit, ``_``, space or ``-``
    removed, spaces turned into ``-``."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)
    kept = (c for c in text.lower() if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The heading anchors of a Markdown document; a repeated slug gets ``-1``, ``-2``, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _exists(path: Path) -> bool:
    if "*" in path.name or any("*" in p for p in path.parts):
        anchor = Path(path.anchor)
        return any(anchor.glob(str(path.relative_to(anchor))))
    return path.exists()


def link_problems(document: Path, text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with the relative links of ``text`` (the contents of ``document``)."""
    problems = []
    for target in link_targets(text):
        if target.startswith(EXTERNAL):
            continue
        file_part, _, fragment = target.partition("#")
        path = (document.parent / file_part).resolve() if file_part else document
        if not _inside(path, root):
            problems.append(f"link {target!r} leaves the repository")
        elif file_part and not path.exists():
            problems.append(f"link {target!r}: {path.relative_to(root)} does not exist")
        elif fragment and path.suffix == ".md":
            heads = anchors(text if path == document else path.read_text(encoding="utf-8"))
            if fragment.lower() not in heads:
                problems.append(f"link {target!r}: no heading of {path.relative_to(root)} has the anchor #{fragment}")
    return problems


def mention_problems(document: Path, text: str, root: Path = ROOT) -> list[str]:
    """Path-like mentions of ``text`` that name nothing in the repository."""
    problems = []
    for mention in path_mentions(text):
        base = document.parent if mention.startswith("../") else root
        path = (base / mention).resolve()
        if not _inside(path, root):
            problems.append(f"mention {mention!r} leaves the repository")
        elif not _exists(path):
            problems.append(f"mention {mention!r}: no such file or folder in the repository")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(document):
    assert link_problems(document, document.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_path_mentions_exist(document):
    assert mention_problems(document, document.read_text(encoding="utf-8")) == []


def test_the_documents_are_found():
    names = {str(p.relative_to(ROOT)) for p in DOCUMENTS}
    assert {"README.md", "CHANGELOG.md", "docs/perf-notes.md", "docs/results/h200/README.md"} <= names


# The checks themselves: each kind of fault is reported, and sound text is not.

def _doc() -> Path:
    return ROOT / "docs" / "example.md"


def test_a_missing_link_target_is_reported():
    text = "See [the notes](perf-notes.md) and [gone](no-such-file.md#top), [web](https://example.com/x.md)."
    assert link_problems(_doc(), text) == ["link 'no-such-file.md#top': docs/no-such-file.md does not exist"]


def test_a_link_outside_the_repository_is_reported():
    assert link_problems(_doc(), "[x](../../outside.md)") == ["link '../../outside.md' leaves the repository"]


def test_a_missing_anchor_is_reported():
    text = "# Title\n\n## A `code` heading, with: punctuation\n\n[ok](#a-code-heading-with-punctuation) [bad](#nope)"
    assert link_problems(_doc(), text) == [f"link '#nope': no heading of docs/example.md has the anchor #nope"]
    assert link_problems(_doc(), "[bad](perf-notes.md#no-such-heading)")[0].endswith("#no-such-heading")


def test_links_in_code_are_not_links():
    assert link_targets("`[a](missing.md)`\n```\n[b](missing.md)\n```\n[c](here.md)") == ["here.md"]


def test_a_missing_path_mention_is_reported():
    text = "Run `scripts/tune_configs.py` or tools/choice_ab.py, see src/fused_swiglu/ and ../shared/ANCHORS.md."
    assert mention_problems(_doc(), text) == [
        "mention 'scripts/tune_configs.py': no such file or folder in the repository",
        "mention '../shared/ANCHORS.md': no such file or folder in the repository",
    ]


def test_mentions_inside_urls_and_longer_paths_are_not_taken():
    text = "https://github.com/NVIDIA/cutlass/tree/main/tools/x and fused_swiglu/tests/none and $OUT/docs/x"
    assert path_mentions(text) == []


def test_a_glob_mention_must_match_something():
    assert mention_problems(_doc(), "`tools/*.py` and `tools/*.nothing`") == [
        "mention 'tools/*.nothing': no such file or folder in the repository"
    ]


def test_slugs_follow_github():
    assert slug("1. First measurement (scripts/tune_configs.py, bf16, 12 reps)") == (
        "1-first-measurement-scriptstune_configspy-bf16-12-reps")
    assert slug("11. M ≥ 512: tile counts") == "11-m--512-tile-counts"
    assert slug("A **bold** and [linked](x.md) `code`") == "a-bold-and-linked-code"
    assert anchors("# Same\n## Same\n```\n# not a heading\n```") == {"same", "same-1"}


def test_the_readme_counts_the_configs_the_build_compiles():
    from fused_swiglu.build import sources, units

    n = len(units.config_names(sources.csrc_dir()))
    text = (ROOT / "README.md").read_text()
    assert f"all {n} ahead" in text and f"every config ({n} of them" in text, n
