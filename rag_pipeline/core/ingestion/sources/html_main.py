"""A web page's main content: the `<main>` element (else `<article>`, else the body) without
navigation, headers, footers, asides, scripts and forms; and the links a crawler follows."""

from __future__ import annotations

from html import escape
from urllib.parse import urldefrag, urljoin

import lxml.html
from lxml import etree

# Elements that frame a page rather than say what it says.
_CHROME = ("nav", "header", "footer", "aside", "script", "style", "noscript", "template", "form", "iframe")
_CHROME_ROLES = ("navigation", "banner", "contentinfo", "complementary", "search")


def _document(data: bytes) -> lxml.html.HtmlElement | None:
    try:
        return lxml.html.document_fromstring(data)
    except (etree.ParserError, ValueError):
        return None


def links(data: bytes, base_url: str) -> list[str]:
    """The absolute http(s) URLs the page links to (navigation included), without fragments."""
    root = _document(data)
    if root is None:
        return []
    found = []
    for href in root.xpath("//a/@href"):
        url = urldefrag(urljoin(base_url, str(href).strip()))[0]
        if url.startswith(("http://", "https://")):
            found.append(url)
    return found


def main_content(data: bytes) -> bytes:
    """The page reduced to its title and main content, as HTML (the page itself if it has no body)."""
    root = _document(data)
    if root is None:
        return data
    title = root.findtext(".//title") or ""
    # The first of these the page has (an element's truth is its number of children: compared with None).
    candidates = [*root.xpath("//main | //*[@role='main']"), *root.xpath("//article"), root.find("body")]
    main = next((element for element in candidates if element is not None), None)
    if main is None:
        return data
    xpath = " | ".join([*(f".//{tag}" for tag in _CHROME), *(f".//*[@role='{role}']" for role in _CHROME_ROLES)])
    for element in main.xpath(xpath):
        if element.getparent() is not None:
            element.drop_tree()
    head = f"<title>{escape(title)}</title>" if title else ""
    body = lxml.html.tostring(main, encoding="unicode")
    return f"<!DOCTYPE html><html><head><meta charset=\"utf-8\">{head}</head><body>{body}</body></html>".encode()
