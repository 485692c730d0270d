"""Text from the repository or the data, made safe for markdown and terminals (one place)."""

from __future__ import annotations

import re
import unicodedata

ZWSP = "\u200b"
# the Unicode categories a terminal or a page acts on: controls (ESC, the C1 CSI), format
# characters (bidi overrides, zero-width), line and paragraph separators
UNSAFE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")


def clean(s, limit: int = 200) -> str:
    """One line of plain text: control and line-break characters become spaces, format characters
    (bidi overrides, zero-width characters) are dropped, whitespace collapsed, long text cut."""
    out = []
    for ch in str(s)[: 4 * limit + 16]:  # bounded work on huge strings
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Zl", "Zp"):
            out.append(" ")
        elif cat != "Cf":
            out.append(ch)
    t = " ".join("".join(out).split())
    return t if len(t) <= limit else t[: limit - 1] + "…"


def term(s) -> str:
    """Stored text for a terminal, kept as it is except that control, line-break and format
    characters (ESC and every OSC/CSI sequence's introducer, bidi overrides) become U+FFFD: an
    imported hostname or branch can then neither retitle the terminal nor write the clipboard."""
    return "".join("\ufffd" if unicodedata.category(ch) in UNSAFE_CATEGORIES else ch for ch in str(s))


# A run of 7+ hex digits that stands alone (no letter, digit or _ either side) with at least one
# letter a-f: GitHub links it when it names a commit of the repository (7 to 40 digits). All-decimal
# runs are left whole: in this data they are numbers (sizes, counts, run ids) far more often than a
# SHA (a 7-digit SHA prefix is all-decimal 1 time in 27, a 40-digit SHA practically never), and an
# invisible character in every large number would travel into whatever it is copied to.
_HEX_RUN = re.compile(r"(?<![0-9A-Za-z_])(?=[0-9]*[A-Fa-f])[0-9A-Fa-f]{7,}(?![0-9A-Za-z_])")
HEX_CHUNK = 6  # below GitHub's shortest linked SHA (7)


def _break_hex(m: re.Match) -> str:
    s = m.group(0)
    return ZWSP.join(s[i: i + HEX_CHUNK] for i in range(0, len(s), HEX_CHUNK))


def json_text(doc_json: str) -> str:
    """JSON text (json.dumps with ensure_ascii=False) for a terminal or file: the control and format
    characters JSON leaves raw (C1 controls, bidi overrides, line and paragraph separators) are
    written as \\u escapes, so the document reads the same and shows nothing it should not."""
    def esc(ch: str) -> str:
        if unicodedata.category(ch) not in UNSAFE_CATEGORIES:
            return ch
        b = ch.encode("utf-16-be")
        return "".join(f"\\u{b[i]:02x}{b[i + 1]:02x}" for i in range(0, len(b), 2))
    return "".join(esc(ch) if ord(ch) >= 0x7f else ch for ch in doc_json)


def md_text(s, limit: int = 200) -> str:
    """Document text for markdown (table cells included): every ASCII punctuation character is
    backslash-escaped (no HTML, links, images, emphasis, entities or table pipes), and a zero-width
    space follows `@` and `#` and breaks `://`, `www.` and `GH-` followed by a digit, and splits every
    standalone run of 7 or more hex digits (not all decimal) into runs of 6 (no mentions, no issue,
    commit or URL autolinks: `@user`, `#1`, `owner/repo#1`, `GH-1`, a bare SHA, `http://`)."""
    t = clean(s, limit)
    t = re.sub(r"(?<=:)(?=//)", ZWSP, t)
    t = re.sub(r"(?i)(?<=www)(?=\.)", ZWSP, t)
    t = re.sub(r"(?i)(?<=gh)(?=-[0-9])", ZWSP, t)
    t = _HEX_RUN.sub(_break_hex, t)
    out = []
    for ch in t:
        if ch.isascii() and not ch.isalnum() and ch.isprintable() and ch != " ":
            out.append("\\" + ch + (ZWSP if ch in "@#" else ""))
        else:
            out.append(ch)
    return "".join(out)


def md_ref(s) -> str:
    """A git ref or sha as inline code when it is made of ref characters only (code spans take no
    escapes), else as escaped text."""
    t = clean(s, 60)
    return f"`{t}`" if re.fullmatch(r"[A-Za-z0-9._/~^+-]{1,40}", t) else md_text(t, 60)
