#!/usr/bin/env python3
"""Generates src/frugal/tokenize/unicode_tables.cc: the character classes the pre-tokenizers test
(letters, numbers, punctuation, symbols, marks, separators, other, white space) as sorted ranges.

Sources, in order of preference:
  * the Unicode Character Database files UnicodeData.txt and PropList.txt (Debian package
    unicode-data installs them under /usr/share/unicode/);
  * Python's unicodedata module, when those files are missing (white space then comes from the
    fixed White_Space list below, which has not changed since Unicode 6.0).

The tokenizers must classify characters exactly as llama.cpp does, and llama.cpp's tables follow
Unicode 15.1. Unicode 15.1 added 627 characters to 15.0 (CJK Extension I, 2EBF0..2EE5D, letters;
U+31EF and U+2FFC..U+2FFF, symbols), so when the input data is 15.0 those are added here. Every
other difference between versions would show up in the tests that compare with llama.cpp.

Usage: scripts/gen_unicode_tables.py [--ucd DIR] [--out FILE]
"""
import argparse
import os
import sys

MAX_CPT = 0x110000

LETTER, NUMBER, PUNCT, SYMBOL, MARK, SEPARATOR, OTHER, WHITESPACE = (1 << i for i in range(8))

CATEGORY_FLAG = {
    "Lu": LETTER, "Ll": LETTER, "Lt": LETTER, "Lm": LETTER, "Lo": LETTER,
    "Nd": NUMBER, "Nl": NUMBER, "No": NUMBER,
    "Pc": PUNCT, "Pd": PUNCT, "Ps": PUNCT, "Pe": PUNCT, "Pi": PUNCT, "Pf": PUNCT, "Po": PUNCT,
    "Sm": SYMBOL, "Sc": SYMBOL, "Sk": SYMBOL, "So": SYMBOL,
    "Mn": MARK, "Mc": MARK, "Me": MARK,
    "Zs": SEPARATOR, "Zl": SEPARATOR, "Zp": SEPARATOR,
    "Cc": OTHER, "Cf": OTHER, "Co": OTHER, "Cs": OTHER, "Cn": OTHER,
}

# PropList.txt White_Space (stable since Unicode 6.0).
WHITE_SPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680] + \
    list(range(0x2000, 0x200B)) + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]

# Characters new in Unicode 15.1 (https://www.unicode.org/versions/Unicode15.1.0/).
UNICODE_15_1_ADDITIONS = [(0x2EBF0, 0x2EE5D, "Lo"), (0x31EF, 0x31EF, "So"), (0x2FFC, 0x2FFF, "So")]


def categories_from_ucd(path):
    cats = ["Cn"] * MAX_CPT
    first = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(";")
            cpt, name, cat = int(fields[0], 16), fields[1], fields[2]
            if name.endswith(", First>"):
                first = cpt
                continue
            if name.endswith(", Last>"):
                for c in range(first, cpt + 1):
                    cats[c] = cat
                first = None
                continue
            cats[cpt] = cat
    return cats


def white_space_from_proplist(path):
    result = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            cpts, prop = (s.strip() for s in line.split(";"))
            if prop != "White_Space":
                continue
            lo, _, hi = cpts.partition("..")
            result.extend(range(int(lo, 16), int(hi or lo, 16) + 1))
    return result


def ucd_version(ucd_dir):
    readme = os.path.join(ucd_dir, "ReadMe.txt")
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            for line in f:
                if "Version" in line and "of the Unicode Standard" in line:
                    for word in line.split():
                        if word[0].isdigit():
                            return word.rstrip(".")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ucd", default="/usr/share/unicode")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "src", "frugal",
                                                  "tokenize", "unicode_tables.cc"))
    args = ap.parse_args()

    data = os.path.join(args.ucd, "UnicodeData.txt")
    if os.path.exists(data):
        cats = categories_from_ucd(data)
        proplist = os.path.join(args.ucd, "PropList.txt")
        white = white_space_from_proplist(proplist) if os.path.exists(proplist) else WHITE_SPACE
        version = ucd_version(args.ucd) or "unknown"
        source = f"{data} (Unicode {version})"
    else:
        import unicodedata
        cats = [unicodedata.category(chr(c)) for c in range(MAX_CPT)]
        white = WHITE_SPACE
        version = unicodedata.unidata_version
        source = f"Python unicodedata (Unicode {version})"

    if version.split(".")[:2] in (["14", "0"], ["15", "0"]):
        if version.startswith("14"):
            sys.exit("Unicode 14 lacks the 15.0 additions too; install unicode-data (15.0) or newer")
        for lo, hi, cat in UNICODE_15_1_ADDITIONS:
            for c in range(lo, hi + 1):
                assert cats[c] == "Cn", hex(c)
                cats[c] = cat
        source += " plus the Unicode 15.1 additions"

    flags = [CATEGORY_FLAG[c] for c in cats]
    for c in white:
        flags[c] |= WHITESPACE

    ranges = []
    for c in range(MAX_CPT):
        if not ranges or ranges[-1][1] != flags[c]:
            ranges.append((c, flags[c]))

    out = []
    out.append("// Generated by scripts/gen_unicode_tables.py from")
    out.append(f"// {source}. Do not edit.")
    out.append("#include \"frugal/tokenize/unicode.h\"")
    out.append("")
    out.append("namespace frugal::unicode {")
    out.append("")
    out.append("// (first code point, flags) of each run of code points with the same flags, ascending;")
    out.append("// a run ends where the next begins, the last at U+10FFFF.")
    out.append("const FlagRange kFlagRanges[] = {")
    line = "   "
    for start, f in ranges:
        item = f" {{0x{start:05X}, 0x{f:02X}}},"
        if len(line) + len(item) > 100:
            out.append(line)
            line = "   "
        line += item
    out.append(line)
    out.append("};")
    out.append(f"const size_t kFlagRangeCount = {len(ranges)};")
    out.append("")
    out.append("}  // namespace frugal::unicode")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(f"{args.out}: {len(ranges)} ranges from {source}")


if __name__ == "__main__":
    main()
