#!/usr/bin/env python3
"""Extracts the demo model's English corpus from Debian packages anyone can install again.

    apt-get install -y python3.11-doc fortunes fortunes-min
    python3 scripts/extract_demo_corpus.py --corpus .carry/demo/corpus.jsonl.gz \
        --heldout model/demo/heldout.txt

Sources:
- python3.11-doc: the reStructuredText sources of the Python 3.11 documentation
  (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt). Prose paragraphs are kept (headings,
  directive bodies such as function descriptions and notes), code, doctests, tables and
  markup-only blocks are dropped; inline markup is reduced to its text. Each paragraph gets the
  nearest heading or described object as its topic.
- fortunes, fortunes-min: /usr/share/games/fortunes/<category>, split on lines holding only "%"
  (ascii-art and two stereotype-heavy categories are left out). The category is the topic.

Every item is {"kind", "topic", "source", "text", "split"}. The split is deterministic: an item
is held out when the first 8 bytes of sha256(text) taken as a big-endian integer are divisible
by 50 (about 2%). The held-out texts, in corpus order, joined by blank lines ("\n\n") with a
final newline, form the held-out file. Only standard library modules are used.
"""

import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import sys

DOCS_DIR = "/usr/share/doc/python3.11/html/_sources"
FORTUNES_DIR = "/usr/share/games/fortunes"
HELDOUT_MODULUS = 50

FORTUNE_TOPICS = {
    "art": "art", "computers": "computers", "cookie": "fortune cookies", "debian": "Debian",
    "definitions": "definitions", "disclaimer": "disclaimers", "drugs": "drugs", "education": "education",
    "food": "food", "fortunes": "fortunes", "goedel": "Goedel", "humorists": "humorists", "kids": "kids",
    "knghtbrd": "life", "law": "the law", "linux": "Linux", "linuxcookie": "Linux", "literature": "literature",
    "love": "love", "magic": "magic", "medicine": "medicine", "miscellaneous": "anything", "news": "the news",
    "paradoxum": "paradoxes", "people": "people", "perl": "Perl", "pets": "pets", "platitudes": "platitudes",
    "politics": "politics", "pratchett": "Terry Pratchett", "riddles": "riddles", "science": "science",
    "songs-poems": "songs and poems", "sports": "sports", "startrek": "Star Trek", "tao": "the Tao",
    "translate-me": "translations", "wisdom": "wisdom", "work": "work", "zippy": "Zippy the Pinhead",
}

# Directives whose indented body is code, tables or navigation: dropped entirely.
SKIP_BODY = {
    "code-block", "sourcecode", "code", "doctest", "testcode", "testoutput", "testsetup", "testcleanup",
    "literalinclude", "productionlist", "highlight", "toctree", "image", "figure", "raw", "csv-table",
    "list-table", "table", "only", "tabularcolumns", "index", "include", "audit-event", "audit-event-table",
    "availability", "moduleauthor", "sectionauthor", "rubric", "centered", "hlist", "literal-block",
    "limited-api-list", "c:namespace", "opcode", "cmdoption", "option", "envvar", "pdbcommand",
}
# Directives that describe an object: their name becomes the topic, their body is prose.
OBJECT_DIRECTIVES = {
    "function", "method", "class", "attribute", "data", "exception", "decorator", "decoratormethod",
    "classmethod", "staticmethod", "abstractmethod", "coroutinefunction", "coroutinemethod", "describe",
    "module", "currentmodule", "c:function", "c:macro", "c:type", "c:member", "c:var", "c:struct",
}

HEADING_CHARS = set("=-~^*#\"+'`:._")
ROLE = re.compile(r":[\w:.-]+:`([^`]*)`")
LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`__?")
NAMED_LINK = re.compile(r"`([^`]+)`__?")
LITERAL = re.compile(r"``(.+?)``")
STRONG = re.compile(r"\*\*(.+?)\*\*")
EMPHASIS = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])")
FOOTNOTE = re.compile(r"\s*\[#?[\w-]*\]_")
SUBST = re.compile(r"\|(\w[\w-]*)\|")
BULLET = re.compile(r"^([*+-]|#\.|\d+\.)\s")


def role_text(match):
    text = match.group(1)
    angle = re.match(r"(.*?)\s*<[^>]*>$", text)
    if angle and angle.group(1):
        text = angle.group(1)
    text = text.lstrip("!~")
    if match.group(0).startswith((":meth:", ":func:", ":class:", ":attr:", ":exc:", ":data:", ":mod:")):
        original = match.group(1).lstrip("!")
        if original.startswith("~"):
            text = text.split(".")[-1]
    return text


def clean_inline(text):
    text = ROLE.sub(role_text, text)
    text = LINK.sub(lambda m: m.group(1), text)
    text = NAMED_LINK.sub(lambda m: m.group(1), text)
    text = LITERAL.sub(lambda m: m.group(1), text)
    text = STRONG.sub(lambda m: m.group(1), text)
    text = EMPHASIS.sub(lambda m: m.group(1), text)
    text = FOOTNOTE.sub("", text)
    text = SUBST.sub(lambda m: m.group(1), text)
    text = text.replace("\\ ", "").replace("\\", "")
    return text


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def is_underline(line, title):
    s = line.strip()
    return len(s) >= 3 and len(set(s)) == 1 and s[0] in HEADING_CHARS and len(s) >= len(title.strip())


def paragraphs(lines):
    """Splits lines into paragraphs (lists of lines) on blank lines."""
    block = []
    for line in lines:
        if line.strip():
            block.append(line.rstrip().replace("\t", "        "))
        elif block:
            yield block
            block = []
    if block:
        yield block


def reflow(block):
    """Joins a paragraph's lines into one line, keeping list items on their own lines."""
    base = min(indent_of(line) for line in block)
    out = []
    for line in block:
        text = line[base:].strip()
        if out and not BULLET.match(text):
            out[-1] += " " + text
        else:
            out.append(text)
    return "\n".join(out)


def prose_ok(text):
    if len(text) < 60 or "::" in text or text.startswith((">>>", "$ ", "|", "+-", "..")):
        return False
    letters = sum(ch.isalpha() for ch in text)
    if letters < 0.6 * len(text):
        return False
    code_marks = sum(text.count(ch) for ch in "{}[]()=_;<>")
    return code_marks < 0.05 * len(text)


def extract_rst(path):
    """Yields (topic, paragraph text) pairs from one reST source file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    topic, module = None, None
    skip_indent = None   # paragraphs indented more than this are skipped (code/tables)
    body_indent = None   # paragraphs indented more than this belong to an object/admonition
    literal_next = False
    for block in paragraphs(lines):
        indent = min(indent_of(line) for line in block)
        if skip_indent is not None:
            if indent > skip_indent:
                continue
            skip_indent = None
        if literal_next:
            literal_next = False
            if indent > last_indent:
                skip_indent = last_indent
                continue
        if body_indent is not None and indent <= body_indent:
            body_indent = None
        last_indent = indent
        first = block[0].strip()
        # Headings: title + underline, or overline + title + underline.
        if len(block) == 2 and is_underline(block[1], block[0]):
            topic = clean_inline(block[0].strip())
            continue
        if len(block) == 3 and is_underline(block[0], block[1]) and is_underline(block[2], block[1]):
            topic = clean_inline(block[1].strip())
            continue
        if len(block) == 1 and len(set(first)) == 1 and first[0] in HEADING_CHARS:
            continue  # transition line
        if first.startswith(".."):
            match = re.match(r"\.\.\s+([\w:-]+)::\s*(.*)", first)
            name = match.group(1) if match else None
            if name in OBJECT_DIRECTIVES:
                arg = match.group(2).strip()
                if name in ("module", "currentmodule"):
                    module = arg or module
                    continue
                obj = re.split(r"[\s(\[]", arg, maxsplit=1)[0] if arg else ""
                if name.startswith("c:"):
                    obj = re.findall(r"\w+", arg.split("(")[0])[-1] if re.findall(r"\w+", arg.split("(")[0]) else obj
                elif module and "." not in obj and name not in ("describe",):
                    obj = f"{module}.{obj}"
                if name in ("function", "method", "classmethod", "staticmethod", "decorator",
                            "coroutinefunction", "coroutinemethod", "abstractmethod", "c:function", "c:macro"):
                    obj += "()"
                topic = obj or topic
                body_indent = indent
                continue
            if name is None or name in SKIP_BODY or not match:
                skip_indent = indent
                continue
            # Admonitions (note, warning, versionchanged, seealso, ...): the body is prose.
            body_indent = indent
            continue
        if first.startswith((">>>", "...", "$ ", "%", "+-", "|", "=====")) or first.startswith(":"):
            if first.startswith(":") and not re.match(r":\w+:`", first):
                continue
            if not first.startswith(":"):
                continue
        text = reflow(block)
        if text.rstrip().endswith("::"):
            literal_next = True
            text = text.rstrip()[:-2].rstrip()
            text = text + ":" if text and not text.endswith(":") else text
        text = clean_inline(text).strip()
        if topic and prose_ok(text):
            yield topic, text


def extract_fortunes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        content = f.read()
    for entry in re.split(r"^%$", content, flags=re.M):
        lines = [line.rstrip().replace("\t", " ") for line in entry.strip("\n").split("\n")]
        lines = [re.sub(r"^ +", "", line) for line in lines]
        text = "\n".join(lines).strip()
        if 20 <= len(text) <= 700 and sum(ch.isalpha() for ch in text) > 0.5 * len(text):
            yield text


def is_heldout(text):
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs-dir", default=DOCS_DIR)
    parser.add_argument("--fortunes-dir", default=FORTUNES_DIR)
    parser.add_argument("--corpus", required=True, help="output .jsonl.gz with every item and its split")
    parser.add_argument("--heldout", required=True, help="output text file with the held-out items")
    args = parser.parse_args()
    items, seen = [], set()
    doc_files = sorted(glob.glob(os.path.join(args.docs_dir, "**", "*.rst.txt"), recursive=True))
    if not doc_files:
        sys.exit(f"no reST sources under {args.docs_dir}: apt-get install python3.11-doc")
    for path in doc_files:
        rel = os.path.relpath(path, args.docs_dir)
        if rel.startswith(("whatsnew/", "c-api/")) or rel in ("license.rst.txt", "copyright.rst.txt"):
            continue
        for topic, text in extract_rst(path):
            if text not in seen:
                seen.add(text)
                items.append({"kind": "doc", "topic": topic, "source": "python3.11-doc:" + rel, "text": text})
    for category in sorted(FORTUNE_TOPICS):
        path = os.path.join(args.fortunes_dir, category)
        if not os.path.exists(path):
            sys.exit(f"missing {path}: apt-get install fortunes fortunes-min")
        for text in extract_fortunes(path):
            if text not in seen:
                seen.add(text)
                items.append({"kind": "fortune", "topic": FORTUNE_TOPICS[category],
                              "source": "fortunes:" + category, "text": text})
    for item in items:
        item["split"] = "heldout" if is_heldout(item["text"]) else "train"
    os.makedirs(os.path.dirname(os.path.abspath(args.corpus)), exist_ok=True)
    with gzip.GzipFile(args.corpus, "wb", mtime=0) as raw:
        for item in items:
            raw.write((json.dumps(item, ensure_ascii=False) + "\n").encode("utf-8"))
    heldout = [item["text"] for item in items if item["split"] == "heldout"]
    os.makedirs(os.path.dirname(os.path.abspath(args.heldout)), exist_ok=True)
    with open(args.heldout, "w", encoding="utf-8") as f:
        f.write("\n\n".join(heldout) + "\n")
    kinds = {}
    for item in items:
        key = (item["kind"], item["split"])
        kinds[key] = kinds.get(key, 0) + len(item["text"])
    print(f"{len(items)} items; characters by (kind, split): {kinds}")
    print(f"held-out: {len(heldout)} items, {os.path.getsize(args.heldout)} bytes -> {args.heldout}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
