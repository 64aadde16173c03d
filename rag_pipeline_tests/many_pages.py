"""A PDF of many small pages, made with pikepdf (reportlab is not installed): each page a heading
and a paragraph in the standard Helvetica font, so pdfminer reads two elements a page."""

from __future__ import annotations

import io

import pikepdf


def many_page_pdf(pages: int) -> bytes:
    """`pages` pages, page i reading "Section i" then a sentence naming i; a few hundred bytes each."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name.Helvetica))
    resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font))
    for number in range(1, pages + 1):
        content = (f"BT /F1 18 Tf 72 720 Td (Section {number}) Tj ET\n"
                   f"BT /F1 11 Tf 72 690 Td (Page {number} explains clause {number} of the long agreement.) Tj ET\n")
        page = pikepdf.Page(pikepdf.Dictionary(Type=pikepdf.Name.Page, MediaBox=[0, 0, 612, 792],
                                               Resources=resources, Contents=pdf.make_stream(content.encode())))
        pdf.pages.append(page)
    out = io.BytesIO()
    pdf.save(out, compress_streams=True, object_stream_mode=pikepdf.ObjectStreamMode.generate)
    return out.getvalue()
