"""Generate the sample production query log of the Tallyo RAG assistant.

Writes, from the template pools in tools/query_log_pools.json:

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
library only, from the pools file, the golden set and the rewordings file, so re-running the script rewrites byte-identical files:

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
# The template pools and slot values the queries are written from (a data file beside this script).
POOLS = ROOT / "tools" / "query_log_pools.json"
_POOLS = json.loads(POOLS.read_text(encoding="utf-8"))


def _topics(name: str) -> dict[str, tuple[float, list[str]]]:
    """A pool of topics: topic -> (weight, templates)."""
    return {topic: (weight, templates) for topic, (weight, templates) in _POOLS[name].items()}

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

SLOTS: dict[str, list[str]] = _POOLS["slots"]


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

CUSTOMER_TOPICS: dict[str, tuple[float, list[str]]] = _topics("customer_topics")

# Topics that bring out the admin role more often on the customer side.
ADMIN_HEAVY = {"plans", "billing", "refunds", "sso", "twofa", "admin", "retention",
               "integrations", "security", "export", "api_auth", "tenant"}

ACME_TOPICS: dict[str, tuple[float, list[str]]] = _topics("acme_topics")

GLOBEX_TOPICS: dict[str, tuple[float, list[str]]] = _topics("globex_topics")

EMPLOYEE_TOPICS: dict[str, tuple[float, list[str]]] = _topics("employee_topics")

SUPPORT_TOPICS: dict[str, tuple[float, list[str]]] = _topics("support_topics")

# Release 2026.11 shipped on 2026-11-25; questions about it appear from then on.
RELEASE_2026_11: list[str] = _POOLS["release_2026_11"]

# Words that must not appear in normal traffic (they belong to the injected scenarios).
SCENARIO_ONLY_WORDS = ("payroll", "payslip", "classic", "invoice designer", "direct deposit")

# --------------------------------------------------------------------------
# Scenario pools (shift days only)
# --------------------------------------------------------------------------

PAYROLL_CUSTOMER: list[str] = _POOLS["payroll_customer"]

PAYROLL_SUPPORT: list[str] = _POOLS["payroll_support"]

DELETED_PAGE: list[str] = _POOLS["deleted_page"]

DELETED_PAGE_SUPPORT: list[str] = _POOLS["deleted_page_support"]

# New phrasing: long chatty messages from the new mobile app.
MOBILE_OPENERS: list[str] = _POOLS["mobile_openers"]
MOBILE_FOLLOWUPS: list[str] = _POOLS["mobile_followups"]
MOBILE_MIDDLES: list[str] = _POOLS["mobile_middles"]
MOBILE_CLOSERS: list[str] = _POOLS["mobile_closers"]
MOBILE_CUSTOMER: list[str] = _POOLS["mobile_customer"]
MOBILE_EMPLOYEE: list[str] = _POOLS["mobile_employee"]


# --------------------------------------------------------------------------
# Light variation
# --------------------------------------------------------------------------

PREFIXES: list[str] = _POOLS["prefixes"]
SUFFIXES: list[str] = _POOLS["suffixes"]


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
