#!/usr/bin/python3
"""Builds the English corpus of the natural-text model from documentation that Debian packages
install: the Python 3.11 documentation sources (python3.11-doc), the PostgreSQL 15 manual
(postgresql-doc-15), Perl's manual pages in POD (perl-doc), Git's manual (git-doc), the Debian
Reference (debian-reference-en), the Linux kernel's documentation sources (linux-doc-6.1, without
its translations), Django's documentation (python-django-doc), and the English manual pages under /usr/share/man (rendered by
groff; the generated per-command gcloud pages are left out: thousands of near-copies).

Each document is normalised (whitespace runs, trailing spaces, at most one blank line in a row),
documents under 400 characters and exact duplicates are dropped, and each goes wholly to the
training or the held-out side by a bit of the SHA-256 of its source path (a well-mixed hash: about
1 in 20 documents is held out). Output, in OUT:
  train.txt, heldout.txt   documents separated by a NUL byte (the trainer puts BOS/EOS there)
  heldout_plain.txt        the held-out documents joined by blank lines (for perplexity tools)
  manifest.json            per source: documents and characters on each side

  /usr/bin/python3 train/text/build_corpus.py --out /work/text-corpus [--procs 2]
"""
import argparse
import glob
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
from multiprocessing import Pool

MIN_CHARS = 400
HELDOUT_OF_256 = 13  # first byte of SHA-256(path) below this: held out (~5.1%)


def normalise(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


class HtmlText(html.parser.HTMLParser):
    """Visible text of an HTML page: block elements become line breaks, scripts and styles go."""
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "dt", "dd",
             "table", "ul", "ol", "blockquote", "section", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip, self.pre = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"):
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "head") and self.skip:
            self.skip -= 1
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.out.append(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self):
        return "".join(self.out)


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def html_doc(path):
    p = HtmlText()
    p.feed(read_text(path))
    return p.text()


def man_doc(path):
    raw = subprocess.run(["sh", "-c", 'zcat -f "$1" | groff -t -man -Tutf8 -P-cbou 2>/dev/null', "_", path],
                         capture_output=True, timeout=60).stdout
    return raw.decode("utf-8", errors="replace")


def pod_doc(path):
    raw = subprocess.run(["pod2text", path], capture_output=True, timeout=60).stdout
    return raw.decode("utf-8", errors="replace")


def sources():
    """(source name, path, loader) for every candidate document."""
    out = []
    for p in sorted(glob.glob("/usr/share/doc/python3.11/html/_sources/**/*.txt", recursive=True)):
        out.append(("python-doc", p, "text"))
    for p in sorted(glob.glob("/usr/share/doc/postgresql-doc-15/html/*.html")):
        out.append(("postgresql-doc", p, "html"))
    for p in sorted(glob.glob("/usr/share/perl/*/pod/*.pod")):
        out.append(("perl-doc", p, "pod"))
    for p in sorted(glob.glob("/usr/share/doc/git-doc/**/*.txt", recursive=True)):
        if not os.path.basename(p).startswith("git"):  # git-*.txt are the man pages, read below
            out.append(("git-doc", p, "text"))
    for p in sorted(glob.glob("/usr/share/doc/debian-reference-en/**/*.html", recursive=True) +
                    glob.glob("/usr/share/debian-reference/*.en.html")):
        out.append(("debian-reference", p, "html"))
    for sec in range(1, 9):
        for p in sorted(glob.glob("/usr/share/man/man%d/*" % sec)):
            if os.path.basename(p).startswith("gcloud"):
                continue
            out.append(("man", p, "man"))
    for p in sorted(glob.glob("/usr/share/doc/linux-doc-6.1/html/_sources/**/*.txt", recursive=True)):
        if "/translations/" not in p:
            out.append(("linux-doc", p, "text"))
    for p in sorted(glob.glob("/usr/share/doc/python-django-doc/html/**/*.html", recursive=True)):
        if os.path.basename(p) not in ("genindex.html", "search.html", "py-modindex.html"):
            out.append(("django-doc", p, "html"))
    seen, uniq = set(), []
    for s in out:
        if s[1] not in seen:
            seen.add(s[1])
            uniq.append(s)
    return uniq


def load(item):
    name, path, kind = item
    try:
        text = {"text": read_text, "html": html_doc, "man": man_doc, "pod": pod_doc}[kind](path)
    except Exception as e:  # an unreadable page is skipped, and counted
        return name, path, None, repr(e)
    return name, path, normalise(text), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated source names (default: all)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    items = sources()
    if a.only:
        keep = set(a.only.split(","))
        items = [it for it in items if it[0] in keep]
    seen = set()
    stats = {}
    files = {side: open(os.path.join(a.out, side + ".txt"), "w", encoding="utf-8") for side in ("train", "heldout")}
    plain = open(os.path.join(a.out, "heldout_plain.txt"), "w", encoding="utf-8")
    with Pool(a.procs) as pool:
        for name, path, text, err in pool.imap(load, items, chunksize=8):
            st = stats.setdefault(name, {"train_docs": 0, "train_chars": 0, "heldout_docs": 0,
                                         "heldout_chars": 0, "short": 0, "duplicate": 0, "failed": 0})
            if text is None:
                st["failed"] += 1
                continue
            if len(text) < MIN_CHARS:
                st["short"] += 1
                continue
            h = hashlib.sha256(text.encode()).digest()
            if h in seen:
                st["duplicate"] += 1
                continue
            seen.add(h)
            side = "heldout" if hashlib.sha256(path.encode()).digest()[0] < HELDOUT_OF_256 else "train"
            files[side].write(text + "\x00")
            if side == "heldout":
                plain.write(text + "\n")
            st[side + "_docs"] += 1
            st[side + "_chars"] += len(text)
    for f in list(files.values()) + [plain]:
        f.close()
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
