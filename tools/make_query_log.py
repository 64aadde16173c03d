"""Generate the sample production query log of the Tallyo RAG assistant.

Writes, from template pools held in this script:

* data/query_log/2026-11-10.jsonl ... data/query_log/2026-11-29.jsonl
  (one JSONL file per UTC day, 20 files, lines sorted by timestamp)
* data/query_log/README.md  (format, counts per day, scenario shares and the
  list of deliberately malformed lines)

Each valid line is one JSON object with the fields ``timestamp``, ``query``,
``tenant`` ("acme", "globex" or null for Pellucid Labs employees), ``roles``
and, optionally, ``session_id``, ``feedback`` ("up"/"down"), ``latency_ms`` and
``_scenario``.

The log has two periods:

* 2026-11-10 .. 2026-11-25, the "normal" period: questions on the topics the
  corpus and the golden set cover, in many wordings (keywords, full
  questions, typos, lowercase, long questions); GOLDEN_SHARE of them re-ask
  a golden question in a user's own words (tools/query_log_paraphrases.json).
  Normal lines have no ``_scenario`` field.
* 2026-11-26 .. 2026-11-29, the "shift": about 40 % normal traffic plus three
  injected changes, each marked with ``_scenario``:
    - ``new_topic``     (~35 %) questions about "Tallyo Payroll", a new product
                        that the corpus says nothing about;
    - ``deleted_page``  (~10 %) questions about the "Tallyo Classic invoice
                        templates" / "legacy invoice designer", whose help page
                        was removed;
    - ``new_phrasing``  (~15 %) long, chatty, multi-sentence messages pasted
                        from the new mobile app, about normal topics.

Seven malformed lines are written at fixed positions (see MALFORMED below and
the README) so that a loader's error handling can be tested.

Everything is generated with a seeded ``random.Random`` and the standard
library only, from this script's pools, the golden set and the rewordings file, so re-running the script rewrites byte-identical files:

    python3 tools/make_query_log.py

The script is not part of the pipeline.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "data" / "query_log"
GOLDEN_SET = ROOT / "data" / "golden" / "golden_set.jsonl"
PARAPHRASES = ROOT / "tools" / "query_log_paraphrases.json"

# Share of normal-period queries that re-ask a golden question in other words. The golden set
# was drawn from this traffic (popular questions recur), so before the shift it describes it;
# the rest of normal traffic asks about other facts of the same documents.
GOLDEN_SHARE = 0.6
SEED = 20261147

FIRST_DAY = dt.date(2026, 11, 10)
LAST_DAY = dt.date(2026, 11, 29)
SHIFT_START = dt.date(2026, 11, 26)

# Valid queries per weekday (Mon=0 .. Sun=6) before a small random jitter.
BASE_VOLUME = {0: 37, 1: 38, 2: 38, 3: 37, 4: 33, 5: 20, 6: 18}
JITTER = 2

# Share of each scenario on the shift days (the rest is normal traffic).
SHIFT_SHARES = {"new_topic": 0.35, "deleted_page": 0.10, "new_phrasing": 0.15}

# Overall user mix: acme customers, globex customers, Pellucid employees.
USER_MIX = {"acme": 0.45, "globex": 0.30, "employee": 0.25}

# Who asks the scenario questions (kept close to USER_MIX overall).
SCENARIO_USER_MIX = {
    "new_topic": {"acme": 0.48, "globex": 0.34, "employee": 0.18},
    "deleted_page": {"acme": 0.55, "globex": 0.40, "employee": 0.05},
    "new_phrasing": {"acme": 0.45, "globex": 0.30, "employee": 0.25},
}

# (up, down) probabilities per scenario; about 15 % of lines get feedback.
FEEDBACK_RATES = {
    "normal": (0.10, 0.05),
    "new_topic": (0.02, 0.22),
    "deleted_page": (0.02, 0.25),
    "new_phrasing": (0.07, 0.10),
}

# --------------------------------------------------------------------------
# Slot values, substituted for {name} in templates
# --------------------------------------------------------------------------

SLOTS: dict[str, list[str]] = {
    "plan": ["Starter", "Growth", "Scale", "Enterprise", "starter", "growth", "scale"],
    "plan2": ["Growth", "Scale", "Enterprise", "growth", "scale"],
    "code": [
        "TLY-4001", "TLY-4010", "TLY-4011", "TLY-4012", "TLY-4012", "TLY-4012",
        "TLY-4030", "TLY-4031", "TLY-4040", "TLY-4090", "TLY-4091", "TLY-4220",
        "TLY-4221", "TLY-4290", "TLY-4290", "TLY-5000", "TLY-5003", "TLY-5003",
        "TLY-5004", "TLY-5030", "TLY-6101", "TLY-6102", "TLY-6103", "TLY-6104",
        "TLY-7001", "TLY-7002", "TLY-7003", "tly-4012", "tly 5003", "TLY4290",
    ],
    "sso_code": ["TLY-6101", "TLY-6102", "TLY-6103", "TLY-6104"],
    "n_users": ["3", "5", "8", "12", "15", "25", "40", "60", "75"],
    "n_extra": ["2", "3", "4", "6"],
    "n_days": ["5", "9", "12", "16", "20", "25", "40"],
    "currency": ["EUR", "USD", "GBP", "CHF", "SEK", "PLN", "CAD", "AUD", "JPY", "DKK"],
    "eu_country": ["Germany", "France", "the Netherlands", "Spain", "Italy", "Belgium", "Austria"],
    "acct": ["Xero", "QuickBooks Online", "QuickBooks", "quickbooks", "xero", "Exact Online", "DATEV"],
    "idp": ["Okta", "Entra ID", "Azure AD", "Google Workspace", "OneLogin", "JumpCloud"],
    "amount": ["250", "400", "500", "750", "800", "1000", "1200", "2500"],
    "small_amount": ["25", "30", "50", "75", "100"],
    "event": ["invoice.paid", "invoice.overdue", "invoice.sent", "invoice.created",
              "payout.paid", "payout.failed", "invoice.bulk_completed"],
    "exit_code": ["1", "2", "3", "4", "5"],
    "role": ["Accountant", "Approver", "Admin", "Member", "Viewer", "accountant", "approver"],
    "month": ["June", "September", "October", "November"],
    "card": ["Amex", "American Express", "Visa", "Mastercard", "UK card", "non-EU card"],
    "country_emp": ["Netherlands", "Ireland", "US", "NL", "Dublin", "Amsterdam", "Austin"],
    "n_years": ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"],
    "n_months": ["2", "3", "4", "5"],
    "city": ["Amsterdam", "Dublin", "Austin"],
    "dest": ["Lisbon", "Berlin", "London", "New York", "Barcelona", "Zurich", "Paris",
             "San Francisco", "Madrid", "Copenhagen", "Austin", "Dublin"],
    "abroad_country": ["Portugal", "Spain", "Italy", "Greece", "the UK", "Canada", "Mexico",
                       "Thailand", "Poland", "France"],
    "pd_schedule": ["tallyo-core-primary", "tallyo-payments-primary", "tallyo-data-primary",
                    "tallyo-core-secondary", "tallyo-payments-secondary"],
    "sla_level": ["99.9%", "99.5%", "99%", "99.95%"],
    "priority": ["P1", "P2", "P3", "P4"],
    "feature": ["config list --show-origin", "peppol delivery", "strict spending policies",
                "the async python client", "keys rotate --grace"],
    "weekday": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"],
    # payroll (new topic)
    "pay_country": ["Brazil", "Germany", "Spain", "the UK", "Canada", "Mexico", "Poland",
                    "India", "Portugal", "the Philippines", "Ireland", "the Netherlands",
                    "Argentina", "Colombia", "the US"],
    "pay_currency": ["BRL", "INR", "PHP", "MXN", "PLN", "GBP", "EUR", "CAD", "COP", "ARS"],
    "pay_freq": ["weekly", "biweekly", "semi-monthly", "monthly"],
    "pay_freq2": ["biweekly", "monthly", "semi-monthly"],
    "n_emp": ["4", "7", "12", "18", "25", "32", "45", "60", "85"],
    "n_contractors": ["2", "3", "5", "8", "11"],
    # deleted page
    "classic_name": ["Classic Serif", "Classic Ledger", "Classic Bold", "Classic Minimal",
                     "Classic Blue", "Classic Compact"],
}


def _inv_no(rng: random.Random) -> str:
    return f"INV-2026-{rng.randint(1, 1480):05d}"


def _hours(rng: random.Random) -> str:
    return str(rng.choice([2, 3, 4, 6, 10, 16, 24, 36]))


SLOT_FUNCS = {"inv_no": _inv_no, "hours": _hours}

SLOT_RE = re.compile(r"\{(\w+)\}")


def fill(template: str, rng: random.Random) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name in SLOT_FUNCS:
            return SLOT_FUNCS[name](rng)
        return rng.choice(SLOTS[name])

    return SLOT_RE.sub(sub, template)


# --------------------------------------------------------------------------
# Normal-period template pools. topic -> (weight, [templates])
# --------------------------------------------------------------------------

CUSTOMER_TOPICS: dict[str, tuple[float, list[str]]] = {
    "plans": (3.0, [
        "how much is the {plan} plan",
        "{plan} plan price per month",
        "whats the difference between growth and scale",
        "Starter vs Growth - which one has full API access?",
        "What's the price of {plan} if we pay month to month instead of yearly?",
        "how many users are included in {plan}?",
        "cost per additional user on {plan}",
        "We have {n_users} people who need a login. Which plan makes the most sense for us?",
        "how many invoices can we issue per month on {plan}",
        "expense report limit {plan}",
        "can we have more than one legal entity on the growth plan",
        "how many currencies can I invoice in on the {plan} plan?",
        "does {plan} include SAML single sign-on",
        "which plan do I need for SCIM provisioning",
        "pricing page says Custom for enterprise, what does that actually mean",
        "Is there any discount if we commit to a year up front?",
        "how do I upgrade from {plan} to {plan2}",
        "If I downgrade in the middle of the billing period, when does the lower plan start?",
        "switch from monthly to annual billing",
        "can we go back to monthly billing after choosing annual?",
        "we got an email saying we're at 80% of our invoices, what happens next",
        "invoice limit reached what now",
        "do drafts count towards the monthly invoice limit",
        "does a credit note count as an invoice for the plan limit?",
        "do recurring invoice templates count toward my limit or just the invoices they create",
        "when does the monthly invoice quota reset? our timezone is CET",
        "are your prices in USD? we're based in {eu_country}",
        "do the prices on the pricing page include VAT",
        "audit log retention {plan}",
        "how many approval steps can a workflow have on {plan}",
        "what kind of support do we get on {plan}",
        "is phone support only on enterprise?",
        "plan comparison",
        "pricing",
        "tallyo plans",
        "cheapest plan with the xero integration",
        "we're on {plan} and need {n_users} seats, what would the monthly bill be",
        "Is the mobile app included in every plan or only the paid ones?",
    ]),
    "trial": (1.2, [
        "how long is the free trial",
        "do I need a credit card to start the trial",
        "Which plan's features do I get while I'm on the trial?",
        "trial ended, is my data gone?",
        "what happens after the 14 day trial if we don't pay",
        "can I extend my trial? need another week to test with our accountant",
        "trial workspace is read only now, how do I reactivate it",
        "free trial plan",
        "if we subscribe after the trial do we keep everything we set up",
    ]),
    "billing": (2.5, [
        "what payment methods do you accept for the subscription",
        "can we pay our tallyo subscription by bank transfer",
        "when will my card be charged",
        "my card payment for the subscription failed, what happens now",
        "card declined on renewal - will our account get locked?",
        "where can I download my tallyo invoices",
        "need the invoice for our Tallyo subscription for our accountant",
        "how do I add our VAT number to billing",
        "add VAT ID so we are not charged VAT",
        "can I change the company name on old invoices from you",
        "Our company was renamed last month. Can the invoices you sent us before be reissued with the new name?",
        "how do I cancel my subscription",
        "cancel tallyo",
        "do I get money back if I downgrade",
        "why was I charged for extra users",
        "unexpected charge for additional seats this month",
        "do guest accountants count as paid users",
        "Our external bookkeeper has a login. Is she billed as a seat?",
        "if I deactivate a user do I stop paying for them right away",
        "can I change the billing date",
        "charged twice this month",
        "how do I update the credit card on file",
        "who in our workspace can see and change billing",
        "billing email address change",
    ]),
    "refunds": (2.0, [
        "refund policy",
        "how long do I have to request a refund",
        "can I get a refund? signed up {n_days} days ago",
        "is there a money-back guarantee",
        "We paid for a year {n_days} days ago and it's not for us. Can we get our money back?",
        "refund for the unused months if I cancel an annual plan?",
        "how do I request a refund",
        "I was charged twice, how do I get the duplicate refunded",
        "duplicate charge refund",
        "do you give credits for outages",
        "the service was down for hours yesterday, are we entitled to a credit?",
        "what happens if I do a chargeback through my bank",
        "refund window 14 or 30 days?? your pages say different things",
        "what can't be refunded",
        "refund on a downgrade from {plan2} to {plan}",
    ]),
    "errors": (3.5, [
        "what does {code} mean",
        "{code}",
        "{code} error",
        "getting {code} what does it mean",
        "error {code} how to fix",
        "keep seeing {code} in the app",
        "what is error code {code}",
        "How do I fix {code}?",
        "{code} meaning",
        "our integration logs show {code} - is it on your side or ours?",
        "list of tallyo error codes",
        "error codes starting with 5, should we retry or not?",
        "where do I find the request_id to send to support",
        "api returns TLY-4012 since this morning, nothing changed on our side",
        "TLY-4012 api key expired how do I renew",
        "can an expired API key be reactivated?",
        "got TLY-4010 but I'm definitely sending the key, what's wrong",
        "TLY-4011 key revoked - who revoked it?",
        "TLY-4030 when I try to approve an expense",
        "TLY-4031 on POST /v2/invoices, we're on starter",
        "TLY-4040 invoice not found but I can see it in the web app",
        "TLY-4090 invoice number already exists",
        "duplicate invoice number error when creating invoices through the api",
        "TLY-4091 idempotency key reused? we generate a new one per retry",
        "TLY-4220 currency not enabled, how do I enable {currency}",
        "TLY-4221 VAT number invalid but the customer insists it's correct",
        "TLY-4290 too many requests",
        "TLY-5000 keeps happening on every request",
        "A client's card payment failed with TLY-5003. If we retry, could they be charged twice?",
        "TLY-5003 payment processor timeout",
        "TLY-5004 bank sync error",
        "bank feed hasn't synced since yesterday, TLY-5004",
        "TLY-5030 - is there maintenance right now?",
        "SSO error {sso_code}",
        "{sso_code} when logging in with SSO",
        "TLY-6101 signature could not be verified after we changed the cert",
        "TLY-6102 assertion outside validity window",
        "TLY-6104 email domain not verified",
        "TLY-7001 import columns not recognised",
        "csv import fails with TLY-7001, where do I get the template",
        "TLY-7002 export link expired",
        "the export download link doesn't work anymore",
        "TLY-7003 too many exports running",
    ]),
    "rate_limits": (2.0, [
        "api rate limit {plan}",
        "how many requests per minute on the {plan} plan",
        "what's the burst limit on growth",
        "daily api request limit",
        "when does the daily api limit reset",
        "do rate limits apply per api key or per workspace",
        "If I create more API keys, do we get a higher limit?",
        "does the CLI count towards the API rate limit",
        "does the mobile app use up our api quota",
        "how are bulk invoice requests counted against the limit",
        "rate limit for the reports endpoints",
        "X-RateLimit-Remaining header meaning",
        "what headers tell me how close I am to the rate limit",
        "we got a bunch of 429s, how long should we wait before retrying",
        "can enterprise customers get a higher rate limit",
        "how many exports can run at the same time on {plan}",
        "token bucket rate limiting - how does it work in tallyo",
        "We're on {plan} and our nightly sync does about 150k requests. Will that get blocked?",
    ]),
    "api_auth": (1.8, [
        "how do I create an API key",
        "where do I generate api keys",
        "api key scopes",
        "can I make a read only api key",
        "how long are API keys valid",
        "rotate api key without downtime",
        "can I set an api key to never expire",
        "Authorization header format for the api",
        "oauth for partner apps - how long does the access token last",
        "refresh token lifetime",
        "how do idempotency keys work",
        "how long do you remember an Idempotency-Key",
        "can I restrict API keys to certain IP addresses",
        "ip allowlist api",
        "api v1 end of life date",
        "is v1 of the API being shut down?",
        "what does the Sunset header on v1 responses mean",
    ]),
    "sso": (1.8, [
        "how do I set up SAML SSO",
        "sso setup {idp}",
        "can we use {idp} for single sign-on with tallyo",
        "which plan supports single sign-on",
        "enforce SSO for all users",
        "Can we require SSO for everybody but keep a password login for the owners?",
        "what attributes does tallyo need in the saml assertion",
        "our IdP signing certificate expires soon, how do we rotate it without locking everyone out",
        "upload new idp signing certificate",
        "users can't log in after we turned on sso",
        "clock skew tolerance for saml",
        "does tallyo support OIDC or only SAML",
        "SCIM provisioning setup",
        "what if our identity provider is down, can anyone still get in",
    ]),
    "twofa": (1.6, [
        "how do I turn on 2fa",
        "two factor authentication methods supported",
        "can I use a yubikey / security key for 2fa",
        "does tallyo support SMS codes for 2FA",
        "make 2FA mandatory for the whole workspace",
        "lost my phone with the authenticator app",
        "how do I use a recovery code",
        "new phone, how do I move my 2fa over",
        "can an admin reset 2fa for a user",
        "Our only owner dropped their phone in the sea and has no recovery codes. What now?",
        "how long does support take to remove 2fa from an owner account",
        "trusted device - how long before it asks for the 2fa code again",
        "2fa code not accepted",
    ]),
    "export": (1.8, [
        "how do I export all my data",
        "export invoices to csv",
        "export expenses to excel",
        "download everything before we leave tallyo",
        "tallyo export --since example",
        "does export --since include invoices that were changed after the date or only new ones",
        "how long is the export download link valid",
        "what's included in a full export, receipts too?",
        "export format options",
        "can I import an export into another tallyo workspace",
        "We're moving to a different tool. What's the best way to take our data with us?",
        "export only one entity",
        "can exports be scheduled",
        "export stuck in progress for an hour",
    ]),
    "retention": (2.0, [
        "how long do deleted invoices stay in the trash",
        "restore a deleted expense",
        "can I delete an issued invoice",
        "void vs delete invoice",
        "data retention policy",
        "how long are backups kept",
        "After we close the workspace, how long do you keep our data?",
        "how long are receipt images stored",
        "how long do you keep logs",
        "can you put a legal hold on our data",
        "how long is the audit log kept on {plan}",
        "GDPR erasure request for a former employee's data",
        "delete workspace",
        "how do I delete our workspace",
        "someone deleted our workspace by accident, can it be restored??",
        "who is allowed to delete the workspace",
        "delete my user account but keep the company workspace",
        "delete account via api or cli",
        "how long until data is completely erased after deletion",
    ]),
    "integrations": (2.0, [
        "connect {acct}",
        "{acct} integration sync frequency",
        "how often does tallyo sync with {acct}",
        "is {acct} available on {plan}",
        "DATEV export setup",
        "which plan do we need for Exact Online",
        "invoice not syncing to {acct}",
        "sync failed because of a locked period",
        "I edited an invoice after it synced to xero, what happens",
        "what does the Needs attention queue mean",
        "map expense categories to ledger accounts",
        "tax rate mapping {acct}",
        "how are clients matched when syncing to accounting",
        "are draft invoices synced",
        "approve expenses from slack",
        "microsoft teams integration for approvals, which plan",
        "what does the stripe integration do",
        "zapier triggers available",
        "google drive archive integration",
        "who can connect integrations",
        "disconnect quickbooks",
    ]),
    "invoices": (2.2, [
        "how do I create an invoice",
        "send invoice by email",
        "create invoice in {currency}",
        "change invoice numbering format",
        "can I restart invoice numbers every year",
        "e-invoicing peppol support",
        "share invoice link with client",
        "record a partial payment",
        "client paid half of invoice {inv_no}, how do I record it",
        "how to issue a credit note",
        "credit note vs refund",
        "refund a client who paid by card",
        "set up a monthly recurring invoice",
        "can recurring invoices be sent automatically",
        "stop a recurring invoice",
        "edit invoice after sending",
        "add logo to invoice",
        "can I put a discount line on an invoice",
        "multiple tax rates on one invoice",
        "is there a max number of line items per invoice",
        "add my bank details to invoices",
        "change default payment terms from 30 days",
    ]),
    "reminders": (1.6, [
        "payment reminders how do they work",
        "set up automatic reminders for overdue invoices",
        "reminder schedule options",
        "when does the final notice go out on the standard schedule",
        "customize reminder email text",
        "placeholders for reminder emails",
        "charge late fees automatically",
        "late fee percentage or fixed amount",
        "are late fees allowed in {eu_country}",
        "is there a maximum late fee",
        "client already paid but still gets reminder emails",
        "pause reminders for one client",
        "mark invoice as disputed",
        "what does the 'I have already paid' button do",
        "turn off reminders for invoice {inv_no}",
    ]),
    "approvals": (1.8, [
        "set up an expense approval workflow",
        "two step approval for expenses over {amount}",
        "approval conditions by amount or category",
        "what's the default approval workflow",
        "auto-approve small expenses under {small_amount}",
        "spending policy limits per category",
        "my manager is on holiday, who approves my expenses",
        "delegate approvals while I'm out of office",
        "expense stuck waiting for approval for a week",
        "how often does tallyo remind approvers",
        "approve expenses in slack",
        "can finance be the second approver",
        "is there a limit to how much an approver can sign off",
    ]),
    "receipts": (1.6, [
        "how do I scan a receipt",
        "receipt scanning takes forever",
        "forward receipts by email",
        "what's my receipt forwarding address",
        "supported receipt file types",
        "can I upload a pdf receipt",
        "are HEIC photos supported",
        "what fields does receipt scanning pick up",
        "why are some receipt fields highlighted",
        "duplicate receipt detected but it isn't a duplicate",
        "which exchange rate is used for a {currency} receipt",
        "do I need to keep the paper receipts after scanning",
        "max file size for receipts",
    ]),
    "payments": (1.8, [
        "tallyo payments fees",
        "card fees when clients pay invoices online",
        "fee for {card} payments",
        "SEPA direct debit fee",
        "ACH fee",
        "payout schedule",
        "when do payouts arrive",
        "our first payout is taking ages",
        "why are my payouts held for 7 days",
        "change payouts to weekly",
        "reconcile payouts with bank statement",
        "payout reference TALLYO PO on the bank statement",
        "download payout report csv",
        "payout failed, bank account closed",
        "payout.failed what do I do",
        "chargeback fee",
        "are refunds to clients free",
        "minimum payout amount {currency}",
    ]),
    "webhooks": (1.8, [
        "how to set up a webhook endpoint",
        "webhook events list",
        "which webhook event fires when an invoice is paid",
        "{event} payload example",
        "verify webhook signature",
        "webhook signature verification failing in node even though secret is right",
        "Tallyo-Signature header format",
        "what is whsec",
        "how many times do you retry a webhook",
        "webhook retry schedule",
        "test webhooks locally",
        "tallyo webhooks listen isn't receiving events",
        "trigger a test {event} event",
        "how many webhook endpoints on {plan}",
        "webhook timestamp tolerance",
        "disable a webhook endpoint temporarily",
    ]),
    "cli": (1.6, [
        "install tallyo cli",
        "brew install tallyo",
        "tallyo login in CI without a browser",
        "tallyo whoami",
        "cli is using the wrong entity",
        "tallyo config list --show-origin",
        "how to switch profiles in the cli",
        "cli exit code {exit_code}",
        "tallyo cli output as json",
        "tallyo invoices list filter by status",
        "tallyo expenses list for last month",
        "tallyo keys rotate",
        "send invoices from the command line",
        "cli behind a corporate proxy",
    ]),
    "config": (1.0, [
        "http.max_retries default",
        "environment variable for max retries",
        "where is the tallyo config file",
        "config file location on windows",
        "TALLYO_PROFILE env var",
        "disable telemetry in the cli",
        "which status codes does the sdk retry",
        "timeout setting sdk",
        "precedence of flags vs env vars vs config file",
    ]),
    "sdk": (1.4, [
        "python sdk install",
        "pip install tallyo",
        "tallyo python client example",
        "pagination in the python sdk",
        "iterate over all invoices with the sdk",
        "tallyo.ConflictError",
        "sdk exceptions list",
        "RateLimitError python sdk retry",
        "construct_event webhook python",
        "SignatureVerificationError",
        "enable debug logging in the python sdk",
        "which python versions does the sdk support",
        "pin the api version in the sdk",
        "is there a node sdk",
    ]),
    "invoices_api": (1.2, [
        "create invoice via api",
        "POST /v2/invoices example",
        "send an invoice through the api",
        "list invoices api filter by date",
        "void invoice api",
        "bulk create invoices api",
        "invoice.bulk_completed",
        "invoice metadata limits",
        "how many metadata keys can an invoice have",
        "Tallyo-Entity header what is it",
        "graphql api",
        "how do I get access to the graphql beta",
    ]),
    "security": (1.4, [
        "is tallyo soc 2 compliant",
        "how do we request your SOC 2 report",
        "iso 27001 certificate",
        "pci dss tallyo",
        "do you sign a DPA",
        "where is our data hosted",
        "data residency EU",
        "encryption at rest",
        "how fast do you notify customers of a data breach",
        "RPO RTO",
        "disaster recovery plan",
        "security whitepaper",
        "Our security team needs to know which certifications you hold before we sign. Where can I find that?",
    ]),
    "admin": (1.6, [
        "user roles explained",
        "what can an {role} do",
        "difference between admin and owner",
        "{role} role permissions",
        "can an approver see company-wide reports",
        "can the accountant role approve expenses",
        "is the viewer role read only",
        "how many owners can a workspace have",
        "transfer ownership of the workspace",
        "add a second owner",
        "invite team members",
        "restrict a user to one entity",
        "change a user's role",
        "add another legal entity",
    ]),
    "getting_started": (0.8, [
        "getting started with tallyo",
        "first steps after signing up",
        "how do I set up my company in tallyo",
        "what's the difference between a workspace and an entity",
        "connect accounting software during setup",
    ]),
    "release_notes": (0.6, [
        "what's new in tallyo",
        "release notes {month}",
        "latest release",
        "when was {feature} released",
        "mobile app minimum ios version",
    ]),
    "mobile": (0.6, [
        "tallyo mobile app",
        "is there an android app",
        "ios app download",
        "apple watch app",
        "is there an ipad app",
        "does the mobile app work offline",
    ]),
    "noise": (0.5, [
        "hi", "hello", "test", "asdf", "help", "talk to a human",
        "can I speak with someone from support", "thanks", "?", "is this thing working",
        "what can you do",
    ]),
}

# Topics that bring out the admin role more often on the customer side.
ADMIN_HEAVY = {"plans", "billing", "refunds", "sso", "twofa", "admin", "retention",
               "integrations", "security", "export", "api_auth", "tenant"}

ACME_TOPICS: dict[str, tuple[float, list[str]]] = {
    "tenant": (2.2, [
        "what entity id do we put in okta for our sso",
        "acme sso entity id",
        "SCIM provisioning with okta for our workspace",
        "What role do new people get when they first sign in through Okta?",
        "how long does an sso session last for us before people have to log in again",
        "when does our okta signing certificate expire",
        "break glass account for acme",
        "what uptime is in our contract",
        "acme support hours",
        "is {priority} support 24/7 for us",
        "service credits if uptime drops below {sla_level}",
        "who is our customer success manager",
        "is acme's data stored in the US",
        "response time for a {priority} ticket",
        "who is allowed to open support tickets for acme",
        "When someone leaves Acme and we remove them in Okta, are they removed from Tallyo too?",
        "our SLA - resolution target for {priority}",
    ]),
}

GLOBEX_TOPICS: dict[str, tuple[float, list[str]]] = {
    "tenant": (2.2, [
        "globex entra id sso config",
        "our azure ad sso login fails",
        "entity id for our workspace sso",
        "JIT provisioning - how do leavers get removed",
        "default role for new sso users",
        "conditional access policy tallyo",
        "is the sso session 8 hours for us",
        "when does our entra certificate expire",
        "Is all Globex data kept inside the EU? Our DPO is asking.",
        "globex data residency frankfurt",
        "support hours CET",
        "what uptime does our contract guarantee",
        "service credit table in our sla",
        "response target for {priority}",
        "who can open tickets on behalf of globex",
        "what happens to the tallyo account when a globex employee leaves",
    ]),
}

EMPLOYEE_TOPICS: dict[str, tuple[float, list[str]]] = {
    "parental": (2.0, [
        "parental leave",
        "how many weeks of parental leave",
        "parental leave for the non-birthing parent",
        "is parental leave fully paid",
        "parental leave adoption",
        "do I need 6 months service for parental leave",
        "can I split my parental leave into blocks",
        "When do I have to tell my manager I'm planning parental leave?",
        "parental leave twins",
        "phased return after parental leave",
        "does my pension keep going during parental leave",
        "do contractors get parental leave",
        "leave before the birth for pregnancy appointments",
        "leave after losing a pregnancy",
        "how do I request parental leave in harbor",
        "what changed in the 2025 parental leave policy",
        "my wife is due in {month}, how much paid leave can I take as the dad",
    ]),
    "pto": (2.6, [
        "how many vacation days do I get",
        "annual leave {country_emp} {n_years} years",
        "pto accrual by tenure",
        "carry over unused holiday",
        "when do carried over days expire",
        "book holiday in harbor",
        "how far ahead should I request time off",
        "public holidays {city} office",
        "which holiday calendar applies to me if I'm fully remote",
        "company days off this year",
        "working on a public holiday - do I get a day back",
        "how do I call in sick",
        "after how many sick days do I need a doctor's note",
        "sick pay {country_emp}",
        "bereavement leave",
        "volunteering day",
        "unpaid leave request",
        "jury duty leave",
        "can I take half days of pto",
        "I've been here {n_years} years in {city}, how many days off per year?",
    ]),
    "expenses": (2.6, [
        "meal allowance per day when travelling",
        "per diem {dest}",
        "hotel cap {dest}",
        "do I need pre approval for a {amount} euro expense",
        "expense submission deadline",
        "forgot to submit an expense from {n_months} months ago",
        "business class on long flights",
        "train or plane for {dest}",
        "taxi or uber allowed on business trips",
        "client dinner expense limit",
        "conference ticket approval",
        "who gets a corporate card",
        "lost the receipt, can I still expense it",
        "when are expenses reimbursed",
        "expense approved after the 20th, when do I get the money",
        "I'm going to {dest} for a customer workshop next month. What's the nightly hotel limit and can I claim dinners?",
        "new expense policy vs old one, what changed",
    ]),
    "remote": (1.6, [
        "working from abroad {abroad_country}",
        "can I work from another country for a month",
        "core hours",
        "coworking space reimbursement",
        "home office budget",
        "internet allowance for remote employees",
        "switch from hybrid to fully remote",
        "relocating to another country, what's the process",
        "Thinking of spending December with family in {abroad_country} and working from there. Allowed?",
    ]),
    "conduct": (0.9, [
        "gift from a vendor, can I keep it",
        "gift limit per year",
        "conflict of interest side project",
        "how to report harassment",
        "anonymous way to raise a concern",
        "can I buy shares of a customer",
    ]),
    "sabbatical": (0.8, [
        "sabbatical policy",
        "when does the sabbatical start",
        "how long is the sabbatical and is it paid",
        "sabbatical after 5 years?",
        "do I have to pay back my sabbatical if I leave",
    ]),
    "fourday": (0.4, [
        "four day week",
        "is the 4 day week pilot happening",
        "are we moving to a 4-day week?",
    ]),
    "it": (1.8, [
        "laptop options",
        "mac or linux laptop for engineers",
        "designer laptop specs",
        "laptop refresh policy",
        "when do I get a new laptop",
        "My MacBook is {n_years} years old and getting slow. Can I ask for a replacement?",
        "laptop stolen what do I do",
        "broke my laptop screen, who pays",
        "can I buy my old laptop",
        "returning my laptop when I leave",
        "monitor and accessories budget",
        "do we get a company phone",
        "how do I install software that needs admin rights",
    ]),
    "security": (1.2, [
        "password manager",
        "mfa requirements for employees",
        "can I use chatgpt for work",
        "ai tools policy customer data",
        "report a phishing email",
        "security training deadline",
        "can I use my personal laptop for work",
        "data classification levels",
        "can I look at customer data to debug a ticket",
    ]),
    "oncall": (2.0, [
        "on call allowance",
        "on call pay for secondary",
        "paged at night, when do I have to start the next day",
        "swap on call shift",
        "how often will I be on call",
        "on call response time",
        "{pd_schedule}",
        "what does {pd_schedule} cover",
        "who is on call for payments this week",
        "on call handover checklist",
        "on call on a public holiday",
        "how is incident time paid",
        "I was on call over the weekend and worked {hours} hours on an incident. How does the compensation work?",
    ]),
    "incidents": (1.0, [
        "sev1 vs sev2",
        "who can declare an incident",
        "incident commander responsibilities",
        "postmortem deadline",
        "postmortem template",
        "status page update during incident",
    ]),
    "onboarding": (1.0, [
        "first day checklist",
        "when will my laptop arrive",
        "onboarding buddy",
        "30 60 90 day check-in",
        "mandatory training for new hires",
        "I start on the 24th, when do I get my first salary",
        "when do new engineers join the on-call rotation",
    ]),
    "benefits": (1.6, [
        "health insurance {country_emp}",
        "pension contribution {country_emp}",
        "learning budget",
        "learning budget left this year",
        "language lessons",
        "wellbeing allowance",
        "employee assistance programme",
        "stock options",
        "referral bonus",
        "annual bonus",
        "gym membership",
    ]),
    "perf": (1.2, [
        "review cycle timeline",
        "when is the self review due",
        "how many peer reviewers",
        "rating scale performance review",
        "what does a rating of {n_rating} mean",
        "calibration",
        "promotion criteria",
        "promotion process",
        "performance improvement plan",
    ]),
    "office": (0.5, [
        "can I bring my dog to the office",
        "office wifi password",
        "who owns the handbook",
        "how do I suggest a change to the handbook",
    ]),
}
SLOTS["n_rating"] = ["1", "2", "3", "4", "5"]

SUPPORT_TOPICS: dict[str, tuple[float, list[str]]] = {
    "runbook": (3.0, [
        "how much can I refund as L1",
        "refund authority L2",
        "goodwill credit limit",
        "support escalation tiers",
        "when do we page for TLY-5003",
        "TLY-5003 spike, what's the paging threshold",
        "owner 2fa removal checklist",
        "suspected account takeover steps",
        "incident comms template for customers",
        "first status page update within how many minutes",
        "acme {priority} ticket escalation",
        "globex asking about sla credits, how do I apply them",
        "customer wants a refund after {n_days} days, what do I tell them",
        "customer quoting the 30 day guarantee but refunds page says 14, what do we honour",
        "enterprise customer escalation path",
        "who approves refunds over {amount}",
        "Customer says the owner lost their 2FA device. What's the verification process before we remove it?",
    ]),
}

# Release 2026.11 shipped on 2026-11-25; questions about it appear from then on.
RELEASE_2026_11 = [
    "async client python sdk",
    "AsyncTallyo example",
    "tallyo keys rotate --grace",
    "webhook retries changed to 8 attempts?",
    "peppol belgium norway",
    "what's in the 2026.11 release",
]

# Words that must not appear in normal traffic (they belong to the injected scenarios).
SCENARIO_ONLY_WORDS = ("payroll", "payslip", "classic", "invoice designer", "direct deposit")

# --------------------------------------------------------------------------
# Scenario pools (shift days only)
# --------------------------------------------------------------------------

PAYROLL_CUSTOMER = [
    "how do I run payroll in tallyo",
    "tallyo payroll pricing",
    "is tallyo payroll included in the {plan} plan?",
    "run payroll for {n_emp} employees",
    "first payroll run step by step",
    "how do I add an employee to payroll",
    "payroll for employees in {pay_country}",
    "does tallyo payroll support {pay_country}",
    "pay contractors in {pay_country} through tallyo payroll",
    "paying international contractors in {pay_currency}",
    "We have {n_contractors} contractors abroad. Can Tallyo Payroll pay them in their local currency?",
    "fees for paying contractors in other countries",
    "do contractors get a payslip or do they send us an invoice",
    "where can employees download their payslips",
    "customize the payslip template",
    "can employees see payslips in the mobile app",
    "resend a payslip to an employee",
    "payroll tax filing {pay_country}",
    "does tallyo file our payroll taxes automatically",
    "quarterly payroll tax filing deadlines",
    "form 941 with tallyo payroll",
    "W-2 and 1099 at year end with tallyo payroll",
    "RTI submissions uk payroll tallyo",
    "payroll calendar 2027",
    "how do I set the payroll calendar to {pay_freq}",
    "change pay frequency from {pay_freq} to {pay_freq2}",
    "what's the deadline to approve a payroll run before payday",
    "direct deposit cutoff time",
    "what time is the direct deposit cutoff for a {weekday} payday",
    "If I approve payroll after the cutoff, when do people actually get paid?",
    "employee didn't receive direct deposit",
    "off-cycle payroll run for a bonus",
    "add a one-time bonus to this month's payroll",
    "payroll deductions setup pension and health insurance",
    "reverse a payroll run",
    "payroll approval workflow",
    "sync tallyo payroll to {acct}",
    "is tallyo payroll live for everyone yet",
    "how do I turn on tallyo payroll",
    "migrate from gusto to tallyo payroll",
    "tax forms for new hires in payroll",
    "who can see salaries in tallyo payroll",
    "can the accountant role run payroll",
    "holiday pay calculation in payroll",
    "error when submitting a payroll run",
    "Tallyo Payroll",
    "payroll",
    "payslips",
    "payroll tax",
    "new payroll feature",
    "does payroll check minimum wage in {pay_country}",
    "does payroll handle a 13th month salary",
    "tallyo payroll cost per employee per month",
    "can I run payroll from the mobile app",
    "Saw the Tallyo Payroll announcement. We pay {n_emp} people {pay_freq} - how do we switch over from our current provider?",
    "payroll calendar with bank holidays {pay_country}",
    "payroll tax filing deadline missed, what happens",
    "direct deposit same day possible?",
]

PAYROLL_SUPPORT = [
    "customer asking how to run their first payroll, do we have docs for tallyo payroll yet?",
    "tallyo payroll escalation path for support",
    "payroll tax filing question from a customer, who handles these?",
    "direct deposit cutoff times for tallyo payroll - internal reference?",
    "which countries does tallyo payroll launch in",
    "payroll launch FAQ for support",
    "customer says payslips are missing after a payroll run, what do I check",
    "contractor payments abroad - is that tallyo payroll or normal payouts?",
    "refund policy for tallyo payroll add-on",
]

DELETED_PAGE = [
    "tallyo classic invoice templates",
    "where did the classic invoice templates go",
    "legacy invoice designer",
    "can't find the legacy invoice designer anymore",
    "the help page for classic invoice templates is gone (404)",
    "how do I edit my Tallyo Classic template",
    "our invoices still use the '{classic_name}' template, how do I change the logo on it",
    "move classic templates to the new invoice editor",
    "is the legacy invoice designer being retired?",
    "custom CSS in my classic template isn't applied anymore",
    "where's the link to the old invoice designer",
    "bring back the Classic invoice layout",
    "legacy designer: add a custom field to the invoice footer",
    "are tallyo classic templates deprecated",
    "The article about customising Tallyo Classic invoice templates disappeared. Where can I find it now?",
    "how do I duplicate a classic invoice template",
    "change fonts in {classic_name}",
    "can I still assign a classic template to a specific client",
    "legacy invoice designer page not found",
    "old invoice designer vs new one",
    "reset default template to {classic_name}",
    "page margins in the classic template print layout",
    "{classic_name} template",
]

DELETED_PAGE_SUPPORT = [
    "customer asking where the classic invoice templates article went, what do we link now",
    "legacy invoice designer help page removed? need a replacement link for a ticket",
]

# New phrasing: long chatty messages from the new mobile app.
MOBILE_OPENERS = [
    "hey so I'm on the mobile app and",
    "hi! so im using the tallyo app on my phone and",
    "Hello, I'm writing this from the new mobile app.",
    "ok so I'm on my phone (the new app) and",
    "hey there, quick thing from the android app -",
    "So I just updated the iPhone app and",
    "Hi, sorry if this is a dumb question, I'm on the mobile app and",
    "heyy, using the app on my phone between meetings and",
    "good morning! on the mobile app right now and",
    "hi hi, typing from the app so excuse typos.",
]
MOBILE_FOLLOWUPS = [
    "also,", "oh and one more thing,", "another question:", "sorry one more -",
    "ok and also", "and while I'm here,",
]
MOBILE_MIDDLES = [
    "", "", "",
    "I'm not super technical so please keep it simple.",
    "My manager asked me to sort this out today.",
    "I couldn't find it in the help centre.",
    "I looked around in settings but couldn't see anything.",
    "I don't have my laptop with me this week.",
]
MOBILE_CLOSERS = [
    "thanks!", "thx in advance", "sorry for the long message", "any help appreciated!!",
    "", "cheers", "thank you so much", "(sorry typing on phone)", "ty",
]
MOBILE_CUSTOMER = [
    ("I'm trying to approve a few expense reports from my team while I'm travelling.",
     "is there a way to hand my approvals to someone else until next Friday?"),
    ("a client just told me they already paid invoice {inv_no} but the app keeps sending them reminders.",
     "how do I make the reminders stop for that one client?"),
    ("I took a picture of a restaurant receipt in {currency} and the amount it converted to looks off.",
     "which exchange rate do you use and can I fix it?"),
    ("I got a notification that just says {code}.",
     "what does that mean and do I need to do anything?"),
    ("my boss asked me to check how much we pay for the {plan} plan.",
     "can you tell me the monthly price and what happens if we add {n_extra} more people?"),
    ("I got a new phone and now my authenticator codes don't work at all.",
     "how do I get back into my account? I think I have recovery codes somewhere."),
    ("I wanted to send an invoice to a new client but it says the currency isn't enabled.",
     "how do I turn on {currency} for our entity?"),
    ("I need to get all of last year's invoices out for our accountant.",
     "can I do the export from here or only in the web app? and how long does the download link work?"),
    ("we started taking card payments through Tallyo last week.",
     "when does the money actually show up in our bank account??"),
    ("I'm looking at a line on our bank statement that says TALLYO PO and then some letters.",
     "how do I see which invoices are in it?"),
    ("a client paid only part of the invoice.",
     "how do I record the partial payment so the rest stays open?"),
    ("one of our users can't log in with SSO anymore, the app just shows {sso_code}.",
     "is that something on our side?"),
    ("I deleted a couple of expenses by mistake yesterday.",
     "can I still get them back and how long do I have?"),
    ("I want to set up a recurring invoice for a retainer client, every month on the 1st.",
     "can I do that on the phone or only on desktop?"),
    ("our bookkeeper wants to approve expenses but shouldn't be able to touch billing.",
     "which role should I give her?"),
    ("I forwarded a receipt to the email address but it hasn't shown up yet.",
     "how long does that normally take?"),
    ("we got charged for {n_extra} extra users this month which I didn't expect.",
     "why does that happen and how do I avoid it?"),
    ("we're winding down the business so I'm thinking of cancelling.",
     "if I cancel now do I get anything back for the annual plan we paid in {month}?"),
    ("I want everyone in our workspace to use two-factor.",
     "is that a setting I can switch on from here?"),
    ("a customer is disputing an invoice.",
     "how do I mark it as disputed so the late fee doesn't kick in?"),
    ("I'm setting up late fees for the first time.",
     "can it be a percentage per month or only a fixed fee?"),
    ("it says our monthly invoice limit is almost used up.",
     "what happens when we hit it, can I still send invoices today?"),
    ("I'm trying to connect our {acct} account.",
     "is that included in our plan or do we need to upgrade?"),
    ("our developer says the API started failing with TLY-4012.",
     "what do I need to click to fix it? he's on holiday."),
    ("I'm on the payouts screen and one payout says failed.",
     "what do I need to do so the money gets sent again?"),
    ("I'm trying to invite our new office manager.",
     "will adding her push us over the users included in our plan?"),
    ("our accountant wants the invoices Tallyo sends us for the subscription.",
     "where can I download those?"),
]
MOBILE_EMPLOYEE = [
    ("I'm at the airport trying to submit my hotel receipt from the {dest} trip.",
     "what's the max per night I can claim there?"),
    ("I'm logging my dinner from the customer visit.",
     "how much can I claim per day for meals when travelling?"),
    ("I just found a taxi receipt from {n_months} months ago that I never submitted.",
     "can I still get reimbursed for it?"),
    ("I'm on call this week and got woken up twice last night.",
     "do I still have to be online at 9 tomorrow?"),
    ("my kid is sick and I need to stay home today.",
     "does that come out of my sick days or is there something else?"),
    ("I'm booking flights for the offsite in {dest}.",
     "is it ok to book business class or only economy?"),
    ("I'm trying to book my holiday for the week after New Year.",
     "how many days can I carry over into next year and when do they expire?"),
    ("I'm at a conference in {dest} and paid the ticket with my own card.",
     "did I need pre-approval for that or can I just file the expense now?"),
    ("my laptop just got stolen on the train.",
     "who do I tell first and what happens now?"),
    ("I'm thinking of working from {abroad_country} for a few weeks in January.",
     "is that allowed and do I need to register it somewhere?"),
    ("a supplier dropped off a gift basket at the office for me.",
     "am I allowed to keep it?"),
    ("I'm writing my self review on the train.",
     "when is it due and how many peers should I ask for feedback?"),
]


# --------------------------------------------------------------------------
# Light variation
# --------------------------------------------------------------------------

PREFIXES = ["hi, ", "hello - ", "quick question: ", "pls help: ", "q: ", "hey ", "Hi! "]
SUFFIXES = [" thanks", " thx", " pls", "??", " asap"]


def typo(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    idx = [i for i, w in enumerate(words) if w.isalpha() and len(w) >= 5]
    if not idx:
        return text
    i = rng.choice(idx)
    w = words[i]
    op = rng.randrange(3)
    j = rng.randrange(1, len(w) - 1)
    if op == 0:  # swap two neighbouring letters
        w = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    elif op == 1:  # drop a letter
        w = w[:j] + w[j + 1:]
    else:  # double a letter
        w = w[:j] + w[j] + w[j:]
    words[i] = w
    return " ".join(words)


def vary(text: str, rng: random.Random) -> str:
    if len(text) <= 3:
        return text
    if rng.random() < 0.08:
        text = typo(text, rng)
    if rng.random() < 0.03:
        text = typo(text, rng)
    r = rng.random()
    if r < 0.22:
        text = text.lower()
    elif r < 0.30 and text[0].islower():
        text = text[0].upper() + text[1:]
    if rng.random() < 0.25 and text[-1] in "?.":
        text = text.rstrip("?.")
    elif rng.random() < 0.12 and text[-1].isalnum() and " " in text:
        text += "?"
    if rng.random() < 0.05:
        text = rng.choice(PREFIXES) + text
    if rng.random() < 0.03:
        text += rng.choice(SUFFIXES)
    return text


def pick_weighted(rng: random.Random, items: dict[str, float]) -> str:
    names = list(items)
    return rng.choices(names, weights=[items[n] for n in names], k=1)[0]


def pick_topic(rng: random.Random, topics: dict[str, tuple[float, list[str]]]) -> str:
    return pick_weighted(rng, {k: v[0] for k, v in topics.items()})


# --------------------------------------------------------------------------
# Users, sessions and timestamps
# --------------------------------------------------------------------------

# Local-time activity weights (hour 0..23), then shifted to UTC.
WEEKDAY_LOCAL = [0.1, 0.05, 0.05, 0.05, 0.05, 0.1, 0.3, 1, 3, 6, 7, 7, 5, 6, 7, 6, 5, 3, 2, 1.2, 1, 0.8, 0.5, 0.2]
WEEKEND_LOCAL = [0.2, 0.1, 0.05, 0.05, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 3, 3, 3, 3, 3, 2.5, 2, 2, 2, 2, 1.5, 1, 0.5]

# Hours to add to local time to get UTC, in November.
UTC_OFFSET = {"acme": 5, "globex": -1, "amsterdam": -1, "dublin": 0, "austin": 6}


def hour_weights(place: str, weekend: bool) -> list[float]:
    local = WEEKEND_LOCAL if weekend else WEEKDAY_LOCAL
    off = UTC_OFFSET[place]
    return [local[(h - off) % 24] for h in range(24)]


def make_user(rng: random.Random, kind: str) -> dict:
    if kind == "acme":
        return {"tenant": "acme", "place": "acme", "support": False}
    if kind == "globex":
        return {"tenant": "globex", "place": "globex", "support": False}
    place = pick_weighted(rng, {"amsterdam": 0.45, "dublin": 0.30, "austin": 0.25})
    return {"tenant": None, "place": place, "support": rng.random() < 0.3}


def roles_for(rng: random.Random, user: dict, topic: str) -> list[str]:
    if user["tenant"] is None:
        return ["employee", "support"] if user["support"] else ["employee"]
    p_admin = 0.55 if topic in ADMIN_HEAVY else 0.15
    return ["customer", "admin"] if rng.random() < p_admin else ["customer"]


def session_size(rng: random.Random) -> int:
    return rng.choices([1, 2, 3, 4], weights=[55, 25, 13, 7], k=1)[0]


def load_golden_rewordings() -> list[dict]:
    """Golden cases with four user rewordings each (tools/query_log_paraphrases.json)."""
    rewordings = json.loads(PARAPHRASES.read_text(encoding="utf-8"))
    cases = [json.loads(line) for line in GOLDEN_SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"id": c["id"], "tenant": c["tenant"], "roles": c["roles"], "texts": rewordings[c["id"]]} for c in cases]


def asks_as(user: dict, case: dict) -> bool:
    """Could this user have asked the golden case's question (its tenant and audience)?"""
    if user["tenant"] is None:
        return case["tenant"] is None and "employee" in case["roles"]
    return case["tenant"] in (None, user["tenant"]) and "customer" in case["roles"]


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.used_sessions: set[str] = set()
        self.golden = load_golden_rewordings()

    # ---- query text ----------------------------------------------------

    def normal_query(self, user: dict, day: dt.date, topic: str | None) -> tuple[str, str, str]:
        """Return (topic, text, template) for a normal-traffic query."""
        rng = self.rng
        if (topic is None or topic.startswith("golden:")) and rng.random() < GOLDEN_SHARE:
            case = rng.choice([c for c in self.golden if asks_as(user, c)])
            text = rng.choice(case["texts"])
            return f"golden:{case['id']}", vary(text, rng), text
        if topic is not None and topic.startswith("golden:"):
            topic = None
        if user["tenant"] is None:
            if topic is None:
                if user["support"]:
                    area = pick_weighted(rng, {"support": 0.45, "customer": 0.40, "employee": 0.15})
                else:
                    area = pick_weighted(rng, {"employee": 0.85, "customer": 0.15})
                pools = {"support": SUPPORT_TOPICS, "customer": CUSTOMER_TOPICS,
                         "employee": EMPLOYEE_TOPICS}[area]
                topic = pick_topic(rng, pools)
            pools = {**SUPPORT_TOPICS, **EMPLOYEE_TOPICS, **CUSTOMER_TOPICS}
        else:
            tenant_pool = ACME_TOPICS if user["tenant"] == "acme" else GLOBEX_TOPICS
            pools = {**CUSTOMER_TOPICS, **tenant_pool}
            if topic is None:
                topic = pick_topic(rng, pools)
        if topic == "release_notes" and day >= dt.date(2026, 11, 25) and rng.random() < 0.6:
            template = rng.choice(RELEASE_2026_11)
        else:
            template = rng.choice(pools[topic][1])
        return topic, vary(fill(template, rng), rng), template

    def scenario_query(self, scenario: str, user: dict, first: bool) -> tuple[str, str]:
        """Return (text, template) for an injected scenario query."""
        rng = self.rng
        if scenario == "new_topic":
            pool = PAYROLL_SUPPORT if user["tenant"] is None else PAYROLL_CUSTOMER
            template = rng.choice(pool)
            return vary(fill(template, rng), rng), template
        if scenario == "deleted_page":
            pool = DELETED_PAGE_SUPPORT if user["tenant"] is None else DELETED_PAGE
            template = rng.choice(pool)
            return vary(fill(template, rng), rng), template
        if scenario == "new_phrasing":
            pool = MOBILE_EMPLOYEE if user["tenant"] is None else MOBILE_CUSTOMER
            situation, question = rng.choice(pool)
            opener = rng.choice(MOBILE_OPENERS if first else MOBILE_FOLLOWUPS)
            if opener.endswith((".", "!")):
                situation = situation[0].upper() + situation[1:]
            elif not re.match(r"I\b", situation):
                situation = situation[0].lower() + situation[1:]
            middle = rng.choice(MOBILE_MIDDLES) if first else ""
            parts = [opener, situation, middle, question, rng.choice(MOBILE_CLOSERS)]
            text = " ".join(p for p in parts if p)
            text = fill(text, rng)
            if rng.random() < 0.3:
                text = text.lower()
            if rng.random() < 0.15:
                text = typo(text, rng)
            return text, question
        raise ValueError(scenario)

    # ---- sessions ------------------------------------------------------

    def new_session_id(self) -> str:
        while True:
            sid = f"s-{self.rng.getrandbits(24):06x}"
            if sid not in self.used_sessions:
                self.used_sessions.add(sid)
                return sid

    def session_start(self, day: dt.date, user: dict) -> dt.datetime:
        rng = self.rng
        weights = hour_weights(user["place"], day.weekday() >= 5)
        hour = rng.choices(range(24), weights=weights, k=1)[0]
        start = dt.datetime(day.year, day.month, day.day, hour, tzinfo=dt.timezone.utc)
        return start + dt.timedelta(seconds=rng.randrange(3600))

    def build_session(self, day: dt.date, scenario: str, size: int) -> list[dict]:
        rng = self.rng
        mix = USER_MIX if scenario == "normal" else SCENARIO_USER_MIX[scenario]
        user = make_user(rng, pick_weighted(rng, mix))
        sid = self.new_session_id() if (size > 1 or rng.random() < 0.7) else None
        records = []
        topic = None
        t = self.session_start(day, user)
        used: set[str] = set()
        for i in range(size):
            for _attempt in range(8):  # no template twice in one session
                if scenario == "normal":
                    follow = topic if (topic is not None and rng.random() < 0.6) else None
                    new_topic, text, key = self.normal_query(user, day, follow)
                else:
                    new_topic = scenario
                    text, key = self.scenario_query(scenario, user, first=(i == 0))
                if key not in used:
                    break
            used.add(key)
            topic = new_topic
            if i > 0:
                t = t + dt.timedelta(seconds=rng.randint(20, 420))
            rec = {
                "t": t,
                "query": text,
                "tenant": user["tenant"],
                "roles": roles_for(rng, user, topic) if i == 0 else records[0]["roles"],
                "session_id": sid,
                "scenario": scenario,
            }
            records.append(rec)
        # keep the whole session inside the UTC day
        end_of_day = dt.datetime(day.year, day.month, day.day, 23, 59, 59, tzinfo=dt.timezone.utc)
        overflow = records[-1]["t"] - end_of_day
        if overflow.total_seconds() > 0:
            shift = overflow + dt.timedelta(seconds=rng.randint(30, 900))
            for r in records:
                r["t"] -= shift
        return records

    def finish(self, rec: dict) -> dict:
        rng = self.rng
        out = {
            "timestamp": rec["t"].strftime("%Y-%m-%dT%H:%M:%SZ"),
            "query": rec["query"],
            "tenant": rec["tenant"],
            "roles": list(rec["roles"]),
        }
        if rec["session_id"]:
            out["session_id"] = rec["session_id"]
        up, down = FEEDBACK_RATES[rec["scenario"]]
        r = rng.random()
        if r < up:
            out["feedback"] = "up"
        elif r < up + down:
            out["feedback"] = "down"
        if rng.random() < 0.9:
            base = rng.gauss(280, 110) + 0.9 * len(rec["query"])
            if rec["scenario"] == "new_phrasing":
                base += 120
            out["latency_ms"] = int(min(900, max(80, base)))
        if rec["scenario"] != "normal":
            out["_scenario"] = rec["scenario"]
        return out

    # ---- days ----------------------------------------------------------

    def day_records(self, day: dt.date) -> list[dict]:
        rng = self.rng
        n = BASE_VOLUME[day.weekday()] + rng.randint(-JITTER, JITTER)
        if day >= SHIFT_START:
            counts = {s: round(share * n) for s, share in SHIFT_SHARES.items()}
            counts = {"normal": n - sum(counts.values()), **counts}
        else:
            counts = {"normal": n}
        records: list[dict] = []
        for scenario, c in counts.items():
            while c > 0:
                size = min(c, session_size(rng))
                records.extend(self.build_session(day, scenario, size))
                c -= size
        records.sort(key=lambda r: r["t"])
        return [self.finish(r) for r in records]


# --------------------------------------------------------------------------
# Malformed lines (file, 1-based line number in the final file, kind, description)
# --------------------------------------------------------------------------

MALFORMED = [
    ("2026-11-12", 9, "truncated", "truncated JSON object (the line stops in the middle of the `query` string)"),
    ("2026-11-12", 24, "plain_text", "plain text, not JSON (a log-shipper message)"),
    ("2026-11-15", 6, "missing_query", "JSON object without a `query` field"),
    ("2026-11-18", 15, "empty_query", "JSON object with `\"query\": \"\"`"),
    ("2026-11-18", 31, "array", "JSON array instead of an object"),
    ("2026-11-21", 4, "bad_timestamp", "`timestamp` is `\"N/A\"`, not a date"),
    ("2026-11-21", 12, "single_quotes", "Python dict repr with single quotes, not valid JSON"),
]


def malformed_line(kind: str, ts: str) -> str:
    if kind == "truncated":
        return ('{"timestamp": "' + ts + '", "query": "how do i change the VAT number on our tallyo inv')
    if kind == "plain_text":
        return f"WARN {ts} log-forwarder: upstream connection reset by peer, retrying in 5s"
    if kind == "missing_query":
        return json.dumps({"timestamp": ts, "tenant": "acme", "roles": ["customer"],
                           "session_id": "s-0b7e21", "latency_ms": 212})
    if kind == "empty_query":
        return json.dumps({"timestamp": ts, "query": "", "tenant": "globex", "roles": ["customer"],
                           "latency_ms": 95})
    if kind == "array":
        return json.dumps([ts, "how many times do you retry a webhook", "acme", ["customer"]])
    if kind == "bad_timestamp":
        return json.dumps({"timestamp": "N/A", "query": "does growth include the xero integration",
                           "tenant": "globex", "roles": ["customer"], "latency_ms": 301})
    if kind == "single_quotes":
        return ("{'timestamp': '" + ts + "', 'query': 'expense report limit on starter', "
                "'tenant': 'acme', 'roles': ['customer'], 'latency_ms': 187}")
    raise ValueError(kind)


def insert_malformed(day: str, lines: list[str]) -> list[str]:
    """Insert the day's malformed lines so that each lands on its listed line number."""
    entries = sorted((ln, kind) for d, ln, kind, _ in MALFORMED if d == day)
    out = list(lines)
    for ln, kind in entries:
        idx = ln - 1
        assert 0 < idx <= len(out), (day, ln)
        # a timestamp a few seconds after the line before, kept before the line after
        prev_ts = None
        for j in range(idx - 1, -1, -1):
            m = re.search(r'"timestamp": "([^"]+Z)"', out[j]) or re.search(r"(\d{4}-\d\d-\d\dT[\d:]+Z)", out[j])
            if m:
                prev_ts = m.group(1)
                break
        t = dt.datetime.strptime(prev_ts, "%Y-%m-%dT%H:%M:%SZ") + dt.timedelta(seconds=1)
        out.insert(idx, malformed_line(kind, t.strftime("%Y-%m-%dT%H:%M:%SZ")))
    return out


# --------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------

def write_readme(stats: list[dict]) -> None:
    tot = Counter()
    for s in stats:
        tot.update(s["scenarios"])
        tot["valid"] += s["valid"]
        tot["malformed"] += s["malformed"]
        tot["lines"] += s["lines"]
    tenants = Counter()
    feedback = Counter()
    for s in stats:
        tenants.update(s["tenants"])
        feedback.update(s["feedback"])
    shift = [s for s in stats if dt.date.fromisoformat(s["day"]) >= SHIFT_START]
    shift_tot = Counter()
    for s in shift:
        shift_tot.update(s["scenarios"])
    shift_n = sum(shift_tot.values())

    def pct(a: int, b: int) -> str:
        return f"{100 * a / b:.1f}%"

    rows = []
    for s in stats:
        sc = s["scenarios"]
        d = dt.date.fromisoformat(s["day"])
        rows.append(
            f"| {s['day']} | {d.strftime('%a')} | {s['valid']} | {s['malformed']} | {s['lines']} | "
            f"{sc.get('normal', 0)} | {sc.get('new_topic', 0)} | {sc.get('deleted_page', 0)} | "
            f"{sc.get('new_phrasing', 0)} |"
        )
    rows.append(
        f"| **Total** | | **{tot['valid']}** | **{tot['malformed']}** | **{tot['lines']}** | "
        f"**{tot['normal']}** | **{tot['new_topic']}** | **{tot['deleted_page']}** | **{tot['new_phrasing']}** |"
    )
    shift_rows = [
        f"| `{name}` | {shift_tot[name]} | {pct(shift_tot[name], shift_n)} | {target} |"
        for name, target in [("normal", "~40%"), ("new_topic", "~35%"),
                             ("deleted_page", "~10%"), ("new_phrasing", "~15%")]
    ]
    mal_rows = [f"| `{d}.jsonl` | {ln} | {desc} |" for d, ln, _, desc in MALFORMED]
    n_valid = tot["valid"]
    text = f"""# Sample query log

An invented production query log of the Tallyo RAG assistant (Pellucid Labs): what users typed
into the assistant over 20 days, 2026-11-10 to 2026-11-29. It is meant for drift and coverage
checks against the golden set (`data/golden/golden_set.jsonl`). All of it was generated by
`tools/make_query_log.py` from hand-written template pools with a fixed seed; it is not part
of the corpus and is never ingested as documents.

Regenerate (standard library only, byte-identical output):

```bash
python3 tools/make_query_log.py
```

## Format

One file per UTC day, `YYYY-MM-DD.jsonl`, one JSON object per line (UTF-8), sorted by
`timestamp` within the file.

| Field | Type | Notes |
| --- | --- | --- |
| `timestamp` | string | ISO 8601 in UTC, e.g. `2026-11-10T09:14:03Z`, always inside the file's day |
| `query` | string | What the user typed, as typed (typos, lowercase, keyword queries, long messages) |
| `tenant` | `"acme"`, `"globex"` or `null` | `null` for Pellucid Labs employees |
| `roles` | list of strings | `["customer"]`, `["customer", "admin"]`, `["employee"]`, `["employee", "support"]` |
| `session_id` | string, optional | e.g. `s-7f3a9c`; queries of one session share it |
| `feedback` | `"up"` or `"down"`, optional | on about 15% of lines |
| `latency_ms` | integer, optional | 80-900, on about 90% of lines |
| `_scenario` | string, optional | only on the injected lines of the last 4 days: `new_topic`, `deleted_page`, `new_phrasing`. Normal lines have **no** `_scenario` field |

Users over all {n_valid} valid queries: Acme customers {tenants['acme']} ({pct(tenants['acme'], n_valid)}),
Globex customers {tenants['globex']} ({pct(tenants['globex'], n_valid)}), employees {tenants['employee']}
({pct(tenants['employee'], n_valid)}). Feedback: {feedback['up']} up and {feedback['down']} down
({pct(feedback['up'] + feedback['down'], n_valid)} of lines). Activity follows office hours (Acme in
US Eastern time, Globex in CET, employees in Amsterdam, Dublin and Austin), with fewer queries at
weekends.

## Two periods

- **2026-11-10 .. 2026-11-25 (normal).** The golden set was drawn from traffic like this, so
  about {GOLDEN_SHARE:.0%} of normal queries re-ask a golden question in other words (four
  hand-written rewordings per case, `tools/query_log_paraphrases.json`, by a user who could have
  asked it: the case's tenant and audience). The rest ask about other facts of the same topics:
  plans and pricing, billing, refunds, error codes (TLY-4012, TLY-5003, TLY-61xx...), API
  rate limits and keys, SSO and 2FA, export, retention and deletion, integrations, invoices,
  reminders, expense approvals, receipts, payouts, webhooks, CLI, SDK, security, roles; for
  employees parental leave, PTO, expenses and travel, remote work, laptops, security, on-call,
  incidents, benefits and reviews; for support staff the escalation runbook; plus tenant
  questions on the Acme and Globex SSO and SLA pages, and a little noise ("hi", "test"). A few
  are unanswerable from the corpus, as in real traffic (one golden case asks about payroll in
  Brazil before the product exists).
- **2026-11-26 .. 2026-11-29 (shift).** About 40% normal traffic, plus three injected changes:
  - `new_topic`: the launch of **Tallyo Payroll** (running payroll, payslips, payroll tax
    filings, contractors abroad, payroll calendar, direct deposit cutoffs). The corpus says
    nothing about it; one unanswerable golden case asks whether payroll exists.
  - `deleted_page`: questions about the removed **Tallyo Classic invoice templates / legacy
    invoice designer** help page.
  - `new_phrasing`: long, chatty, multi-sentence messages from the new mobile app ("hey so I'm
    on the mobile app and ...") about normal topics.

Shares over the four shift days ({shift_n} valid queries):

| Scenario | Queries | Share | Target |
| --- | --- | --- | --- |
{chr(10).join(shift_rows)}

## Counts per day

"Valid" counts parseable query lines; "Lines" is the number of lines in the file.

| File day | Weekday | Valid | Malformed | Lines | normal | new_topic | deleted_page | new_phrasing |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

## Malformed lines

{len(MALFORMED)} lines are broken on purpose, on 4 days of the normal period, to test how a
loader reports and skips bad input. Line numbers are 1-based.

| File | Line | What is wrong |
| --- | --- | --- |
{chr(10).join(mal_rows)}
"""
    (OUT_DIR / "README.md").write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def check_pools() -> None:
    normal = []
    for pools in (CUSTOMER_TOPICS, ACME_TOPICS, GLOBEX_TOPICS, EMPLOYEE_TOPICS, SUPPORT_TOPICS):
        for _, templates in pools.values():
            normal.extend(templates)
    normal.extend(RELEASE_2026_11)
    for sit, q in MOBILE_CUSTOMER + MOBILE_EMPLOYEE:
        assert sit[-1] in ".!?" and q[-1] in ".!?", (sit, q)
        normal.extend([sit, q])
    for t in normal:
        low = t.lower()
        for w in SCENARIO_ONLY_WORDS:
            assert w not in low, f"normal template mentions {w!r}: {t}"
        for name in SLOT_RE.findall(t):
            assert name in SLOTS or name in SLOT_FUNCS, f"unknown slot {name!r} in {t}"


def main() -> None:
    check_pools()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    gen = Generator(SEED)
    stats = []
    day = FIRST_DAY
    while day <= LAST_DAY:
        name = day.isoformat()
        recs = gen.day_records(day)
        lines = [json.dumps(r, ensure_ascii=False) for r in recs]
        lines = insert_malformed(name, lines)
        (OUT_DIR / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        stats.append({
            "day": name,
            "valid": len(recs),
            "malformed": len(lines) - len(recs),
            "lines": len(lines),
            "scenarios": Counter(r.get("_scenario", "normal") for r in recs),
            "tenants": Counter(r["tenant"] or "employee" for r in recs),
            "feedback": Counter(r["feedback"] for r in recs if "feedback" in r),
        })
        day += dt.timedelta(days=1)
    write_readme(stats)
    total = sum(s["valid"] for s in stats)
    print(f"wrote {len(stats)} files, {total} valid queries, "
          f"{sum(s['malformed'] for s in stats)} malformed lines, to {OUT_DIR}")


if __name__ == "__main__":
    main()
