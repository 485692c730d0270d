"""Text from the repository or the data, made safe for markdown and terminals (one place)."""

from __future__ import annotations

import re
import unicodedata

ZWSP = "\u200b"


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


def md_text(s, limit: int = 200) -> str:
    """Document text for markdown (table cells included): every ASCII punctuation character is
    backslash-escaped (no HTML, links, images, emphasis, entities or table pipes), and a zero-width
    space follows `@` and `#` and breaks `://` and `www.` (no mentions, issue or URL autolinks)."""
    t = clean(s, limit)
    t = re.sub(r"(?<=:)(?=//)", ZWSP, t)
    t = re.sub(r"(?i)(?<=www)(?=\.)", ZWSP, t)
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
