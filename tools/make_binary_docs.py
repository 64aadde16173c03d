"""Generate the binary sample documents of the bundled corpus.

Writes, from text held in this script:

* data/corpus/product_docs/security-whitepaper.pdf  (text-based PDF, 3 pages)
* data/corpus/product_docs/admin-guide.docx         (Word document with
  Heading 1/Heading 2 styles, a bullet list and a table with a header row)
* data/corpus/product_docs/assets/architecture-diagram.png  (a tiny PNG that
  the pipeline must report as an unsupported file)

plus a ``<file>.meta.yaml`` sidecar next to the PDF and the DOCX.

It is not part of the pipeline and its packages are not project dependencies.
Run it from a scratch virtual environment that has the two packages it needs:

    python3 -m venv /tmp/docvenv
    /tmp/docvenv/bin/pip install fpdf2 python-docx
    /tmp/docvenv/bin/python tools/make_binary_docs.py

The PDF uses the core Helvetica font, so every string in it must be latin-1.
Creation timestamps inside the files (and the DOCX zip member dates) are
pinned, so re-running the script reproduces the same bytes.
"""

from __future__ import annotations

import datetime as _dt
import struct
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "data" / "corpus" / "product_docs"
FIXED_DATE = _dt.datetime(2026, 10, 12, 9, 0, 0, tzinfo=_dt.timezone.utc)

# --------------------------------------------------------------------------
# Security whitepaper (PDF)
# --------------------------------------------------------------------------

WHITEPAPER_TITLE = "Tallyo Security Whitepaper"
WHITEPAPER_SUBTITLE = "Pellucid Labs B.V. - version 4.2 - October 2026"

# Each section: (heading, [blocks]); a block is a paragraph string, or a
# ("table", header, rows) tuple rendered as fixed-width text lines.
WHITEPAPER_SECTIONS: list[tuple[str, list]] = [
    (
        "1. Introduction",
        [
            "Tallyo is used by more than 18,000 businesses to send invoices, collect "
            "payments and manage employee expenses. Our customers trust us with bank "
            "account details, payment records and the personal data of their clients "
            "and employees. This whitepaper describes how Pellucid Labs protects that "
            "data: where it is hosted, how it is encrypted, who can access it, which "
            "independent audits we undergo and how we respond when something goes wrong.",
            "It is written for security and procurement teams evaluating Tallyo. Customers "
            "on the Scale and Enterprise plans can request our latest SOC 2 Type II report "
            "and ISO 27001 certificate under NDA from their account team or through the "
            "Trust Centre at trust.tallyo.com.",
        ],
    ),
    (
        "2. Hosting and data residency",
        [
            "Tallyo runs entirely on Amazon Web Services. Customers choose a region when "
            "the workspace is created: the European Union region (eu-central-1, Frankfurt, "
            "with backups replicated to eu-west-1, Ireland) or the United States region "
            "(us-east-2, Ohio, with backups replicated to us-west-2, Oregon). Customer data "
            "stored in the EU region never leaves the EU, including backups and logs.",
            "Every production service runs in at least three availability zones. Databases "
            "use synchronous replication across zones, so the loss of a single data centre "
            "does not cause data loss. Production, staging and development run in separate "
            "AWS accounts, and no customer data is ever copied to non-production accounts.",
        ],
    ),
    (
        "3. Encryption",
        [
            "All data is encrypted at rest with AES-256. Database volumes, object storage "
            "and backups use keys managed in AWS KMS. Each workspace has its own data "
            "encryption key, wrapped by a regional master key that is rotated every year.",
            "Bank account numbers and API credentials receive an additional layer of "
            "field-level encryption with separate keys that are rotated every 90 days. "
            "Only the payment and payout services can decrypt these fields.",
            "Data in transit is protected with TLS 1.2 or higher; TLS 1.3 is preferred and "
            "used by all modern browsers. HSTS is enabled with a one-year max-age on every "
            "Tallyo domain. Internal service-to-service traffic uses mutual TLS.",
            "Card numbers never reach Tallyo servers: they are collected by our payment "
            "partner's hosted fields. Tallyo itself is therefore assessed against PCI DSS "
            "SAQ A, while the partner holds a PCI DSS Level 1 attestation.",
        ],
    ),
    (
        "4. Access control",
        [
            "Employees sign in to every internal system through single sign-on with "
            "phishing-resistant hardware security keys. Access follows least privilege and "
            "is reviewed every quarter by each system owner.",
            "No engineer has standing access to production data. Access is granted through "
            "a break-glass request linked to a ticket, lasts at most 2 hours and is recorded "
            "in full; the Security team reviews every session on the next business day. "
            "Support agents view customer data only through the support console, which logs "
            "each record viewed.",
            "All employees pass a background check before they start, where local law "
            "allows, and complete security awareness training within 14 days of joining "
            "and every year after that.",
        ],
    ),
    (
        "5. Compliance and certifications",
        [
            "Pellucid Labs maintains the following independent attestations. Reports are "
            "available to customers and prospects under NDA.",
            (
                "table",
                ["Framework", "Scope", "Audit frequency", "Latest result"],
                [
                    ["SOC 2 Type II", "Security, Availability, Confidentiality", "Yearly (Oct-Sep)", "Sept 2026, no exceptions"],
                    ["ISO/IEC 27001:2022", "All Tallyo services and offices", "Yearly surveillance", "Certified to 2028"],
                    ["PCI DSS", "Tallyo Payments (SAQ A)", "Yearly", "Attested June 2026"],
                    ["GDPR", "Processor for customer data", "Continuous; DPA", "DPA v3.1 (Mar 2026)"],
                ],
            ),
            "A Data Processing Agreement based on the EU Standard Contractual Clauses is "
            "included in our terms for every customer. The list of subprocessors is "
            "published at trust.tallyo.com/subprocessors; customers who subscribe are "
            "notified 30 days before a new subprocessor is added.",
        ],
    ),
    (
        "6. Backups and business continuity",
        [
            "Databases are backed up continuously with point-in-time recovery. Snapshots "
            "are taken every 15 minutes and kept for 35 days on a rolling basis, encrypted "
            "and stored in a second region within the same jurisdiction.",
            "Our recovery objectives for a full regional outage are a recovery point "
            "objective (RPO) of 15 minutes and a recovery time objective (RTO) of 4 hours. "
            "We test a full regional failover twice a year, in April and October, and "
            "restore a random sample of backups every week to prove they are usable.",
        ],
    ),
    (
        "7. Vulnerability management",
        [
            "Every code change is reviewed by a second engineer and scanned for known "
            "vulnerable dependencies and secrets before merge. Container images are "
            "rebuilt weekly on patched base images.",
            "An independent penetration test of the web application, API and mobile apps "
            "is carried out every year, plus after any major architectural change. "
            "Critical findings are fixed within 7 days, high findings within 30 days and "
            "medium findings within 90 days.",
            "Our public bug bounty programme pays up to USD 10,000 for critical "
            "vulnerabilities. Researchers can report issues to security@tallyo.com; "
            "we acknowledge reports within 2 business days.",
        ],
    ),
    (
        "8. Incident response and breach notification",
        [
            "A security rotation is on call 24/7. Suspected incidents are triaged within "
            "30 minutes and handled under a documented incident response plan that is "
            "exercised with a tabletop simulation every quarter.",
            "If we confirm a personal data breach affecting customer data, we notify the "
            "affected customers without undue delay and no later than 48 hours after "
            "confirmation, so that they can meet their own 72-hour obligation to the "
            "supervisory authority under the GDPR. Notifications go to the workspace "
            "Owners and to the security contact registered in the workspace settings.",
        ],
    ),
    (
        "9. Customer security controls",
        [
            "Customers can strengthen the security of their own workspace with SAML single "
            "sign-on (Scale and Enterprise), SCIM provisioning (Enterprise), mandatory "
            "two-factor authentication, IP allow-listing for the API (Enterprise), "
            "API keys with limited scopes and expiry, and an audit log retained for up "
            "to 7 years on Enterprise. The administrator guide explains how to configure "
            "each of these controls.",
        ],
    ),
]


def build_pdf(path: Path) -> None:
    from fpdf import FPDF

    class Whitepaper(FPDF):
        def header(self) -> None:  # noqa: D401 - fpdf hook
            if self.page_no() == 1:
                return
            self.set_font("Helvetica", "I", 8)
            self.cell(0, 6, WHITEPAPER_TITLE + " - Public", align="R")
            self.ln(8)

        def footer(self) -> None:
            self.set_y(-12)
            self.set_font("Helvetica", "", 8)
            self.cell(0, 6, f"Page {self.page_no()}", align="C")

    pdf = Whitepaper(format="A4")
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_title(WHITEPAPER_TITLE)
    pdf.set_author("Pellucid Labs Security Team")
    pdf.set_auto_page_break(auto=True, margin=18)
    pdf.set_margins(20, 18, 20)
    pdf.add_page()

    pdf.set_font("Helvetica", "B", 20)
    pdf.multi_cell(0, 10, WHITEPAPER_TITLE, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 10)
    pdf.multi_cell(0, 6, WHITEPAPER_SUBTITLE, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)

    for heading, blocks in WHITEPAPER_SECTIONS:
        if pdf.get_y() > 240:
            pdf.add_page()
        pdf.set_font("Helvetica", "B", 13)
        pdf.ln(2)
        pdf.multi_cell(0, 8, heading, new_x="LMARGIN", new_y="NEXT")
        for block in blocks:
            if isinstance(block, tuple) and block[0] == "table":
                _, header, rows = block
                widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

                def fmt(cells: list[str]) -> str:
                    return " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

                pdf.set_font("Courier", "B", 7)
                pdf.multi_cell(0, 4.5, fmt(header), new_x="LMARGIN", new_y="NEXT")
                pdf.set_font("Courier", "", 7)
                pdf.multi_cell(0, 4.5, "-+-".join("-" * w for w in widths), new_x="LMARGIN", new_y="NEXT")
                for row in rows:
                    pdf.multi_cell(0, 4.5, fmt(row), new_x="LMARGIN", new_y="NEXT")
                pdf.ln(2)
            else:
                pdf.set_font("Helvetica", "", 10)
                pdf.multi_cell(0, 5.2, block, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(2)
    pdf.output(str(path))


# --------------------------------------------------------------------------
# Administrator guide (DOCX)
# --------------------------------------------------------------------------

ADMIN_TITLE = "Tallyo Administrator Guide"

ADMIN_INTRO = (
    "This guide is for workspace Owners and Admins. It explains the Tallyo roles, the "
    "first settings to configure in a new workspace, how to manage users and entities, "
    "and where to find the audit log. It applies to all plans; features limited to "
    "certain plans are marked."
)

ROLE_TABLE_HEADER = ["Role", "Manage users", "Billing and plan", "Issue invoices", "Approve expenses", "Connect integrations", "View reports"]
ROLE_TABLE_ROWS = [
    ["Owner", "Yes", "Yes", "Yes", "Yes", "Yes", "All"],
    ["Admin", "Yes", "No", "Yes", "Yes", "Yes", "All"],
    ["Accountant", "No", "No", "Yes", "Yes", "No", "All"],
    ["Approver", "No", "No", "No", "Own team", "No", "Own team"],
    ["Member", "No", "No", "No", "No", "No", "Own expenses"],
    ["Viewer", "No", "No", "No", "No", "No", "All (read-only)"],
]

SETUP_CHECKLIST = [
    "Complete the legal details, tax ID and base currency of each entity.",
    "Verify the bank account used for payouts (takes 1 to 2 business days).",
    "Set the invoice numbering pattern before issuing the first invoice.",
    "Invite a second Owner so that the workspace is never locked out.",
    "Require two-factor authentication for all users, or configure SAML SSO on Scale and Enterprise.",
    "Review the default expense approval workflow and the auto-approval threshold.",
    "Connect your accounting software and map categories and tax rates.",
]

ADMIN_SECTIONS: list[tuple[str, list]] = [
    (
        "Roles and permissions",
        [
            "Every user has exactly one role per workspace. The role decides what the user "
            "can see and do in every entity of the workspace. The table below summarises "
            "the permissions of the six built-in roles; custom roles are available on "
            "Enterprise.",
            ("table",),
            "Owners are the only users who can change the plan, delete the workspace or "
            "transfer ownership. A workspace can have at most 5 Owners and must always have "
            "at least one. Approvers can approve expense reports only up to their personal "
            "approval limit, which defaults to 5,000 in the entity currency and can be "
            "changed by an Admin in the user's profile.",
        ],
    ),
    (
        "Setting up a new workspace",
        [
            "We recommend completing the following steps before inviting the rest of your "
            "organisation:",
            ("bullets",),
        ],
    ),
    (
        "Managing users",
        [
            "Invite users under Settings > Users > Invite. Invitations expire after 7 days and "
            "can be resent. When someone leaves, deactivate them rather than deleting them: "
            "deactivated users stop counting as a seat at the start of the next billing "
            "period, and their records remain attributed to them. Open expense reports of a "
            "deactivated user are reassigned to their manager.",
            "To transfer ownership, the current Owner opens Settings > Users, selects the new "
            "Owner and chooses Make owner. The new Owner must have two-factor authentication "
            "or SSO enabled.",
        ],
    ),
    (
        "Security settings",
        [
            "Under Settings > Security, Admins can require two-factor authentication, "
            "configure SAML single sign-on, verify email domains and set the idle session "
            "timeout. The idle timeout for password sign-ins defaults to 30 minutes; on Scale "
            "and Enterprise it can be set between 15 and 240 minutes. SSO session lifetime "
            "is configured separately on the SSO settings page.",
        ],
    ),
    (
        "Audit log",
        [
            "The audit log records sign-ins, role changes, API key creation and revocation, "
            "changes to bank accounts, approval decisions, exports and integration changes. "
            "Each entry shows the user, IP address, time and the old and new values. The "
            "audit log is retained for 30 days on Starter, 90 days on Growth, 1 year on "
            "Scale and 7 years on Enterprise.",
            "Export the audit log from Settings > Security > Audit log, or with the CLI using "
            "tallyo export --include audit-log. Enterprise customers can also stream audit "
            "events to their SIEM over HTTPS.",
        ],
    ),
    (
        "Entities and currencies",
        [
            "Each entity has its own tax ID, base currency, invoice numbering, bank account "
            "and tax rates. Users see all entities unless an Admin restricts them to "
            "selected entities in their profile. The base currency of an entity cannot be "
            "changed after its first invoice is issued; create a new entity instead.",
        ],
    ),
]


def build_docx(path: Path) -> None:
    from docx import Document

    doc = Document()
    props = doc.core_properties
    props.title = ADMIN_TITLE
    props.author = "Pellucid Labs Product Documentation"
    props.created = FIXED_DATE.replace(tzinfo=None)
    props.modified = FIXED_DATE.replace(tzinfo=None)

    doc.add_heading(ADMIN_TITLE, level=1)
    doc.add_paragraph(ADMIN_INTRO)
    for heading, blocks in ADMIN_SECTIONS:
        doc.add_heading(heading, level=2)
        for block in blocks:
            if block == ("table",):
                table = doc.add_table(rows=1, cols=len(ROLE_TABLE_HEADER))
                table.style = "Table Grid"
                for cell, text in zip(table.rows[0].cells, ROLE_TABLE_HEADER):
                    cell.text = text
                    for run in cell.paragraphs[0].runs:
                        run.bold = True
                for row in ROLE_TABLE_ROWS:
                    cells = table.add_row().cells
                    for cell, text in zip(cells, row):
                        cell.text = text
            elif block == ("bullets",):
                for item in SETUP_CHECKLIST:
                    doc.add_paragraph(item, style="List Bullet")
            else:
                doc.add_paragraph(block)
    doc.save(str(path))
    _pin_zip_timestamps(path)


def _pin_zip_timestamps(path: Path) -> None:
    """Rewrite the DOCX zip with fixed member timestamps so output is reproducible."""
    import io
    import zipfile

    with zipfile.ZipFile(path) as src:
        members = [(info, src.read(info.filename)) for info in src.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info, data in members:
            pinned = zipfile.ZipInfo(info.filename, date_time=FIXED_DATE.timetuple()[:6])
            pinned.compress_type = zipfile.ZIP_DEFLATED
            pinned.external_attr = info.external_attr
            dst.writestr(pinned, data)
    path.write_bytes(buf.getvalue())


# --------------------------------------------------------------------------
# Unsupported asset (PNG) and sidecars
# --------------------------------------------------------------------------


def build_png(path: Path, width: int = 16, height: int = 8) -> None:
    """Write a tiny valid RGB PNG with the standard library only."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    rows = b""
    for y in range(height):
        row = bytearray([0])  # filter type: none
        for x in range(width):
            row += bytes((58, 91, 217)) if (x // 4 + y // 4) % 2 else bytes((240, 242, 248))
        rows += bytes(row)
    png = b"\x89PNG\r\n\x1a\n"
    png += chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows, 9))
    png += chunk(b"IEND", b"")
    path.write_bytes(png)


SIDECARS = {
    "security-whitepaper.pdf": (
        'title: "Tallyo Security Whitepaper"\n'
        "tenant: null\n"
        "visibility: public\n"
        "status: published\n"
        "effective_date: 2026-10-12\n"
        "owner: Security\n"
    ),
    "admin-guide.docx": (
        'title: "Tallyo Administrator Guide"\n'
        "tenant: null\n"
        "visibility: public\n"
        "status: published\n"
        "effective_date: 2026-09-01\n"
        "owner: Product Documentation\n"
    ),
}


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "assets").mkdir(exist_ok=True)
    build_pdf(OUT_DIR / "security-whitepaper.pdf")
    build_docx(OUT_DIR / "admin-guide.docx")
    build_png(OUT_DIR / "assets" / "architecture-diagram.png")
    for name, text in SIDECARS.items():
        (OUT_DIR / f"{name}.meta.yaml").write_text(text, encoding="utf-8")
    for name in ("security-whitepaper.pdf", "admin-guide.docx", "assets/architecture-diagram.png"):
        print(f"wrote {OUT_DIR / name} ({(OUT_DIR / name).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
