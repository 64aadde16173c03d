"""Answer generators and deterministic answer checks (no model, no network beyond loopback)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.evaluation.answers.checks import (
    abstention_table,
    check_answer,
    prohibited_claims_made,
    quantities,
)
from rag_pipeline.core.evaluation.answers.generators import (
    ABSTENTION,
    Answer,
    ExtractiveGenerator,
    OpenAICompatibleGenerator,
)
from rag_pipeline.core.models import Hit

PROMPT = PROJECT_ROOT / "data" / "prompts" / "answer.md"
CONTEXT = [
    Hit("hb:leave.md#1", "hb:leave.md", 0.8, 1, text="Parental leave is 20 weeks at full pay. It starts from day one."),
    Hit("hb:leave-2023.md#0", "hb:leave-2023.md", 0.7, 2, text="Parental leave was 16 weeks. This policy is superseded."),
    Hit("hc:refunds.html#0", "hc:refunds.html", 0.5, 3, text="Refunds are issued within 14 days. Error TLY-4012 means the card was declined."),
]
CONTEXT_TEXT = {h.chunk_id: h.text for h in CONTEXT}


def _answer(text: str, abstained: bool = False) -> Answer:
    from rag_pipeline.core.evaluation.answers.generators import parse_citations

    return Answer(text, parse_citations(text), abstained, "test")


def test_an_invented_number_fails_the_faithfulness_proxy():
    good = check_answer(_answer("Parental leave is 20 weeks at full pay [hb:leave.md#1]."), CONTEXT_TEXT, "20 weeks", True)
    assert good.faithful and good.citations_valid and good.missing_facts == []
    bad = check_answer(_answer("Parental leave is 24 weeks at full pay [hb:leave.md#1]."), CONTEXT_TEXT, "20 weeks", True)
    assert not bad.faithful and bad.unsupported_quantities == ["24"] and bad.missing_facts == ["20"]


def test_a_citation_outside_the_context_fails():
    result = check_answer(_answer("Refunds take 14 days [hc:billing-faq.html#2]."), CONTEXT_TEXT, "14 days", True)
    assert not result.citations_valid
    uncited = check_answer(_answer("Refunds take 14 days."), CONTEXT_TEXT, "14 days", True)
    assert not uncited.citations_valid


def test_citing_the_superseded_version_is_caught_by_the_number_it_gives():
    answer = _answer("Parental leave is 16 weeks [hb:leave-2023.md#0].")
    result = check_answer(answer, CONTEXT_TEXT, "20 weeks from day one", True)
    assert result.faithful and result.missing_facts == ["20"]
    assert "hb:leave-2023.md#0" in answer.citations


PROHIBITED = ("Parental leave is 24 weeks.", "Refunds are issued after 30 days.")


def test_a_prohibited_claim_is_caught_with_its_words_and_polarity():
    made = check_answer(_answer("Good news: parental leave is 24 weeks [hb:leave.md#1]."), CONTEXT_TEXT, "20 weeks", True,
                        prohibited_claims=PROHIBITED)
    assert made.prohibited_made == ["Parental leave is 24 weeks."]
    assert made.as_metrics()["answer_no_prohibited_claims_proxy"] == 0.0
    # Another number, the opposite polarity, the words spread over two sentences: not the claim.
    for text in ("Parental leave is 20 weeks [hb:leave.md#1].",
                 "Refunds are never issued after 30 days [hc:refunds.html#0].",
                 "Leave is for parents [hb:leave.md#1]. It lasts 24 weeks [hb:leave.md#1]."):
        check = check_answer(_answer(text), CONTEXT_TEXT, "20 weeks", True, prohibited_claims=PROHIBITED)
        assert check.prohibited_made == [] and check.as_metrics()["answer_no_prohibited_claims_proxy"] == 1.0, text
    negated = ("Refunds are not issued after 30 days.",)
    assert prohibited_claims_made(_answer("Refunds aren't issued after 30 days."), negated) == list(negated)
    assert prohibited_claims_made(Answer(ABSTENTION, [], True, "t"), PROHIBITED) == []
    # A case without prohibited claims gets no such metric (never a free 1.0 in the averages).
    plain = check_answer(_answer("Parental leave is 24 weeks [hb:leave.md#1]."), CONTEXT_TEXT, "20 weeks", True)
    assert plain.prohibited_made is None and not any("prohibited" in k for k in plain.as_metrics())


def test_a_judge_decides_prohibited_claims_when_given():
    asked = []

    def judge(claim: str, text: str) -> bool | None:
        asked.append((claim, text))
        return None if "Refunds" in claim else True

    check = check_answer(_answer("Leave lasts long [hb:leave.md#1]."), CONTEXT_TEXT, "20 weeks", True,
                         claim_judge=judge, prohibited_claims=PROHIBITED)
    assert check.prohibited_made == ["Parental leave is 24 weeks."]
    assert check.as_metrics()["answer_no_prohibited_claims_llm"] == 0.0
    # Each prohibited claim is put to the judge against the answer's text, citations removed.
    put = {claim: text for claim, text in asked if claim in PROHIBITED}
    assert set(put) == set(PROHIBITED)
    assert all("Leave lasts long" in text and "[hb:" not in text for text in put.values())


def test_abstention_is_scored_as_a_2x2_table():
    right = check_answer(Answer(ABSTENTION, [], True, "t"), CONTEXT_TEXT, "Not covered.", False)
    wrong = check_answer(_answer("Yes, payroll runs monthly [hb:leave.md#1]."), CONTEXT_TEXT, "Not covered.", False)
    assert right.abstention_correct and not wrong.abstention_correct
    table = abstention_table([(True, False), (True, True), (False, True), (False, False), (False, True)])
    assert table == {"answered_answerable": 1, "abstained_answerable": 1, "answered_unanswerable": 1, "abstained_unanswerable": 2}


def test_claim_support_proxy():
    result = check_answer(_answer("Refunds are issued within 14 days [hc:refunds.html#0]. "
                                  "Payroll taxes are filed quarterly in Brazil [hc:refunds.html#0]."), CONTEXT_TEXT, "14 days", True)
    assert (result.claims, result.supported_claims) == (2, 1)
    assert result.as_metrics()["answer_claim_support_proxy"] == 0.5


def test_quantities_normalise_amounts_codes_and_percentages():
    assert quantities("€1,000 fee, 2.5 % of TLY-4012 over 30 days") == ["EUR 1000", "2.5%", "TLY-4012", "30"]
    assert quantities("EUR 55, 55€, 55 euros and 55.00 Euro") == ["EUR 55"]
    assert quantities("$55 or £55, 5 percent, ERR_42, a top-10 list") == ["USD 55", "GBP 55", "5%", "ERR-42", "10"]


def test_an_amount_matches_across_notations_but_not_across_currencies():
    context = {"hb:expenses.md#3": "The daily meal allowance is €55 when travelling."}
    same = check_answer(_answer("Meals are reimbursed up to 55 euros a day [hb:expenses.md#3]."), context, "€55 a day.", True)
    assert same.faithful and same.missing_facts == []
    bare = check_answer(_answer("Meals: up to 55 a day [hb:expenses.md#3]."), context, "€55 a day.", True)
    assert bare.faithful and bare.missing_facts == []
    other = check_answer(_answer("Meals are reimbursed up to $55 a day [hb:expenses.md#3]."), context, "€55 a day.", True)
    assert other.unsupported_quantities == ["USD 55"] and other.missing_facts == ["EUR 55"]


def test_extractive_generator_cites_its_sentences_and_abstains_under_the_threshold():
    generator = ExtractiveGenerator(threshold=0.4)
    answer = generator.generate("how many weeks of parental leave", CONTEXT, best_score=0.8)
    assert not answer.abstained and answer.citations[0] == "hb:leave.md#1"
    assert check_answer(answer, CONTEXT_TEXT, "20 weeks", True).citations_valid
    assert generator.generate("parental leave", CONTEXT, best_score=0.2).abstained
    assert generator.generate("quantum chromodynamics", CONTEXT, best_score=0.9).abstained


class _ChatServer:
    """A loopback chat-completions server that plays a script of replies, one per request."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                outer.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status, body, headers = outer.script.pop(0)
                if status == "hang":
                    threading.Event().wait(1.0)
                    status = 200
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self):
        self.server.shutdown()


def _reply(text, prompt_tokens=120, completion_tokens=30):
    return {"choices": [{"message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


@pytest.fixture
def chat():
    servers = []

    def make(script):
        server = _ChatServer(script)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def _generator(url, **kwargs):
    sleeps = []
    generator = OpenAICompatibleGenerator(url, "local-model", PROMPT, api_key="k", sleep=sleeps.append,
                                          price_per_1k_prompt=0.5, price_per_1k_completion=1.5, **kwargs)
    return generator, sleeps


def test_openai_compatible_answer_with_token_and_cost_accounting(chat):
    server = chat([(200, _reply("Parental leave is 20 weeks [hb:leave.md#1]."), {})])
    generator, _ = _generator(server.url)
    answer = generator.generate("how long is parental leave", CONTEXT)
    assert answer.citations == ["hb:leave.md#1"] and not answer.errored
    assert (answer.prompt_tokens, answer.completion_tokens) == (120, 30)
    assert answer.cost == pytest.approx(0.12 * 0.5 + 0.03 * 1.5)
    assert answer.prompt_version == "answer-v1" and answer.model == "local-model" and answer.settings["temperature"] == 0.0
    sent = server.requests[0]["messages"][0]["content"]
    assert "[hb:leave.md#1] Parental leave is 20 weeks" in sent and "how long is parental leave" in sent


def test_rate_limits_are_retried_with_backoff(chat):
    server = chat([(429, {"error": "slow down"}, {"Retry-After": "2"}), (503, {}, {}), (200, _reply(ABSTENTION), {})])
    generator, sleeps = _generator(server.url, backoff_s=0.5)
    answer = generator.generate("payroll in Brazil?", CONTEXT)
    assert answer.abstained and answer.attempts == 3 and not answer.errored
    assert sleeps == [2.0, 1.0]  # Retry-After honoured, then exponential backoff 0.5 * 2**1


def test_malformed_json_and_timeouts_make_the_case_errored_not_the_run(chat):
    server = chat([(200, b"not json at all", {})])
    generator, _ = _generator(server.url)
    answer = generator.generate("q", CONTEXT)
    assert answer.errored and "malformed reply" in answer.error
    slow = chat([("hang", _reply("late"), {}), ("hang", _reply("late"), {})])
    generator, sleeps = _generator(slow.url, timeout_s=0.2, max_retries=1)
    answer = generator.generate("q", CONTEXT)
    assert answer.errored and "no reply" in answer.error and answer.attempts == 2 and len(sleeps) == 1


def test_llm_claim_judge_decides_claim_support_when_configured(chat):
    from rag_pipeline.core.evaluation.answers.generators import ChatClient, LLMClaimJudge

    server = chat([(200, _reply("Yes."), {}), (200, _reply("no"), {})])
    judge = LLMClaimJudge(ChatClient(server.url, "judge-model", max_retries=0))
    answer = _answer("Refunds are issued within 14 days [hc:refunds.html#0]. Payroll runs monthly [hc:refunds.html#0].")
    result = check_answer(answer, CONTEXT_TEXT, "14 days", True, claim_judge=judge)
    assert (result.claims, result.supported_claims) == (2, 1)
    assert result.as_metrics()["answer_claim_support_llm"] == 0.5 and "answer_claim_support_proxy" not in result.as_metrics()
    assert "Claim: Refunds are issued within 14 days" in server.requests[0]["messages"][0]["content"]
