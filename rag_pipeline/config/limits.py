"""What one document of a source may be: its size by type, its parse time, its text, elements and
chunks, its parser's memory; and when a source's files are mostly of types not read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TypeSizeLimits(_Strict):
    """The largest file of each type handed to the parser (MB).

    Markdown, text, reStructuredText and HTML: 8 MB, as a larger file cannot hold fewer than
    2,000,000 characters (max_text_chars' default; a character takes at most 4 bytes) and would
    fail that limit anyway, after a parse. PDF and Word files hold images too, and notebooks their
    outputs: 50 MB, the limit of any file (max_file_mb)."""

    md: float = Field(default=8.0, gt=0)
    txt: float = Field(default=8.0, gt=0)
    rst: float = Field(default=8.0, gt=0)
    ipynb: float = Field(default=50.0, gt=0)
    html: float = Field(default=8.0, gt=0)
    pdf: float = Field(default=50.0, gt=0)
    docx: float = Field(default=50.0, gt=0)


class DocumentLimits(_Strict):
    """Per-document limits: a document over one fails alone, with the limit in its reason; and the
    share of a source's files that may be of types the pipeline does not read."""

    max_file_mb: float = Field(default=50.0, gt=0, description="files larger than this are not read")
    max_file_mb_by_type: TypeSizeLimits = Field(default=TypeSizeLimits(),
                                                 description="files of a type larger than this are refused before parsing")
    max_parse_seconds: float = Field(default=120.0, gt=0, description="the parser is stopped after this long")
    max_text_chars: int = Field(default=2_000_000, ge=1, description="characters of text per document")
    # A Word document's XML is a few tens of MB at a thousand pages (its images are stored as they
    # are); a few MB of zip that declares gigabytes is a decompression bomb.
    max_unpacked_mb: float = Field(default=256.0, gt=0, description="a .docx whose zip inflates to more is refused")
    # The parser worker's address space (virtual memory, so it bounds its resident memory too). A
    # worker with all five parsers loaded maps 1.2 GB, a third of it resident; the largest documents
    # the other limits let through (a 300-page PDF, a Word file of 1.9 million characters) took it
    # to 1.3 GB. 3 GB leaves more than twice that, and keeps two workers under 6 GB whatever they read.
    max_parser_memory_mb: int = Field(default=3072, ge=256, description="address space of a parser worker")
    # What one document may bring into the run's own process (the worker's memory is bounded above):
    # a 300-page PDF gives about 1,000 elements, a Word file of 1.9 million characters about 40,000.
    max_elements: int = Field(default=100_000, ge=1, description="elements (headings, paragraphs...) per document")
    max_chunks: int = Field(default=20_000, ge=1, description="chunks per document")
    # A source whose files are mostly of a type the pipeline does not read (a Sphinx tree before .rst
    # was read) indexes next to nothing: its discovery fails, naming the types, unless they are
    # excluded. A handful of images beside a few pages does not count: the least number of such files.
    max_unsupported_share: float = Field(default=0.5, ge=0, le=1,
                                         description="discovery fails when more of the source's files (those not "
                                                     "excluded) are of types not read; 1: never")
    min_unsupported_files: int = Field(default=10, ge=1, description="... and at least this many of them "
                                                                     "(or all of its files)")

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 1024 * 1024)

    def max_parse_bytes(self, file_type: str) -> int:
        """The largest file of `file_type` handed to the parser."""
        return int(min(self.max_file_mb, getattr(self.max_file_mb_by_type, file_type, self.max_file_mb)) * 1024 * 1024)
