"""The text of a text document's bytes (Markdown, plain text, HTML), decoded by what the file says.

In order: a byte-order mark (UTF-8, UTF-16 LE or BE) decides and is removed, so front matter
after it is still front matter (UTF-16 must then read as text: any even run of bytes decodes, so
a text without a space or line break is refused); an HTML page's declared charset (`<meta charset=...>`, or the
`content` of an http-equiv Content-Type) within its first 4 KB; else UTF-8. Bytes that do not
decode, or NUL bytes in a file without a UTF-16 mark, are a `TextEncodingError` whose message
says where and what to do.
"""

from __future__ import annotations

import codecs
import re

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_DECLARED_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
_DECLARATION_WINDOW = 4096


class TextEncodingError(ValueError):
    """The bytes are not text in any encoding the file declares or implies."""


def declared_charset(data: bytes) -> str | None:
    """The codec an HTML page declares in its first 4 KB, when Python knows it."""
    match = _DECLARED_CHARSET.search(data[:_DECLARATION_WINDOW])
    if match is None:
        return None
    try:
        return codecs.lookup(match.group(1).decode("ascii")).name
    except (LookupError, UnicodeDecodeError):
        return None


def decode_text(data: bytes, file_type: str) -> str:
    """The document's text (see the module docstring); raises TextEncodingError."""
    for mark, codec in _BOMS:
        if data.startswith(mark):
            text = _decode(data[len(mark):], codec, f"{codec} (its byte-order mark says so)")
            if codec != "utf-8" and text.strip() and not any(ch in text for ch in " \t\n"):
                # Any even run of bytes decodes as UTF-16; real text has spaces or line breaks.
                raise TextEncodingError(f"starts with a {codec} byte-order mark but does not read as {codec} text "
                                        "(no space or line break in it): re-save the file as UTF-8")
            return text
    if b"\x00" in data[:8192]:
        raise TextEncodingError("binary content (NUL bytes) in a text file: wrong extension, or UTF-16 without a "
                                "byte-order mark? rename or remove it, or re-save it as UTF-8")
    charset = declared_charset(data) if file_type == "html" else None
    if charset is not None and charset != "utf-8":
        return _decode(data, charset, f"{charset} (the page's declared charset)")
    return _decode(data, "utf-8", "UTF-8")


def _decode(data: bytes, codec: str, described: str) -> str:
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TextEncodingError(
            f"not valid {described} (byte 0x{data[exc.start]:02x} at line {line}): re-save the file as UTF-8"
        ) from exc
