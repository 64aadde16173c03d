"""Answer generators: none, an extractive offline baseline, and any OpenAI-compatible chat endpoint.

Every answer records the prompt version, the model id and the sampling settings, and carries the
chunk ids it cites; the checks in `answer_checks` verify that those ids were in the context.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rag_pipeline.config import AnswersConfig, ConfigError
from rag_pipeline.core.models import Hit
from rag_pipeline.core.retrieval.lexical import analyze

ABSTENTION = "I don't know based on the available documents."
_CITATION = re.compile(r"\[([^\[\]\s]+#\d+)\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


@dataclass
class Answer:
    text: str
    citations: list[str]
    abstained: bool
    generator: str
    model: str = ""
    prompt_version: str = ""
    settings: dict = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    attempts: int = 1
    error: str | None = None

    @property
    def errored(self) -> bool:
        return self.error is not None


class Generator(Protocol):
    name: str

    def generate(self, question: str, context: Sequence[Hit], best_score: float | None,
                 abstain: bool | None = None) -> Answer: ...


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def rank_sentences(question: str, context: Sequence[Hit]) -> list[tuple[int, int, int, str, str]]:
    """The context sentences sharing a term with the question, best first, as (-shared terms,
    chunk rank, position in the chunk, sentence, chunk id): more shared terms first; then the
    better-ranked chunk; then document order."""
    terms = set(analyze(question))
    scored = []
    for rank, hit in enumerate(context):
        for position, sentence in enumerate(split_sentences(hit.text)):
            overlap = len(terms & set(analyze(sentence)))
            if overlap:
                scored.append((-overlap, rank, position, sentence, hit.chunk_id))
    return sorted(scored)


def parse_citations(text: str) -> list[str]:
    """Chunk ids cited as `[doc#n]`, in order of first appearance."""
    return list(dict.fromkeys(_CITATION.findall(text)))


class ExtractiveGenerator:
    """A deterministic, offline baseline: the context sentences that share most terms with the
    question, each citing its chunk; abstains when the evaluation decided the corpus cannot
    answer (`abstain`, the fitted abstention model's decision), or, without that decision, when
    the retrieval's best score is under the calibrated no-result threshold; and always when no
    sentence shares a term with the question."""

    name = "extractive"

    def __init__(self, threshold: float, max_sentences: int = 2) -> None:
        self.threshold = threshold
        self.max_sentences = max_sentences

    def generate(self, question: str, context: Sequence[Hit], best_score: float | None,
                 abstain: bool | None = None) -> Answer:
        settings = {"threshold": self.threshold, "max_sentences": self.max_sentences}
        if abstain is not None:
            settings["abstention"] = "model"
        refuse = abstain if abstain is not None else best_score is None or best_score < self.threshold
        if refuse or not context:
            return Answer(ABSTENTION, [], True, self.name, "extractive", "", settings)
        scored = rank_sentences(question, context)
        if not scored:
            return Answer(ABSTENTION, [], True, self.name, "extractive", "", settings)
        chosen = scored[: self.max_sentences]
        chosen.sort(key=lambda s: (s[1], s[2]))
        text = " ".join(f"{sentence} [{chunk_id}]" for *_, sentence, chunk_id in chosen)
        return Answer(text, list(dict.fromkeys(c[-1] for c in chosen)), False, self.name, "extractive", "", settings)


def load_prompt(path: Path) -> tuple[str, str]:
    """(version, template) of a prompt file: a `version: ...` line, `---`, then the template."""
    header, sep, template = Path(path).read_text(encoding="utf-8").partition("\n---\n")
    version = header.strip().removeprefix("version:").strip() if sep else ""
    if not sep or not version:
        raise ConfigError(f"prompt {path}: expected a first line 'version: <id>' and a '---' line before the template")
    return version, template


@dataclass
class ChatReply:
    text: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 0
    error: str | None = None


class ChatClient:
    """One chat-completions endpoint (OpenAI, vLLM, Ollama...). Timeouts, rate limits (429) and
    server errors are retried with exponential backoff, honouring `Retry-After`; a reply that is
    not the expected JSON comes back as an error, never as an exception."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, settings: dict | None = None,
                 timeout_s: float = 30.0, max_retries: int = 3, backoff_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.settings = settings or {}
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.sleep = sleep

    def complete(self, content: str) -> ChatReply:
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": content}], **self.settings}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        reply = ChatReply(None)
        for attempt in range(self.max_retries + 1):
            reply.attempts = attempt + 1
            try:
                request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return self._parse(response.read(), reply)
            except urllib.error.HTTPError as exc:
                reply.error = f"HTTP {exc.code} from {self.url}"
                if (exc.code == 429 or exc.code >= 500) and attempt < self.max_retries:
                    self.sleep(self._delay(attempt, exc.headers.get("Retry-After")))
                    continue
                return reply
            except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
                reply.error = f"no reply from {self.url}: {getattr(exc, 'reason', exc)}"
                if attempt < self.max_retries:
                    self.sleep(self._delay(attempt, None))
                    continue
                return reply
        return reply

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return float(retry_after)
            except ValueError:
                pass
        return self.backoff_s * 2**attempt

    @staticmethod
    def _parse(raw: bytes, reply: ChatReply) -> ChatReply:
        try:
            payload = json.loads(raw)
            text = payload["choices"][0]["message"]["content"]
            if not isinstance(text, str):
                raise TypeError("message content is not text")
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            reply.error = f"malformed reply ({type(exc).__name__}): {raw[:200]!r}"
            return reply
        usage = payload.get("usage") or {}
        reply.text = text.strip()
        reply.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        reply.completion_tokens = int(usage.get("completion_tokens") or 0)
        reply.error = None
        return reply


class OpenAICompatibleGenerator:
    """Answers from a chat-completions endpoint with the versioned prompt; the base URL, model and
    key come from the caller (the config reads them from environment variables)."""

    name = "openai-compatible"

    def __init__(
        self,
        base_url: str,
        model: str,
        prompt_path: Path,
        api_key: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 300,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        price_per_1k_prompt: float = 0.0,
        price_per_1k_completion: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model = model
        self.prompt_version, self.template = load_prompt(prompt_path)
        self.settings = {"temperature": temperature, "max_tokens": max_tokens}
        self.client = ChatClient(base_url, model, api_key, self.settings, timeout_s, max_retries, backoff_s, sleep)
        self.prices = (price_per_1k_prompt, price_per_1k_completion)

    def _prompt(self, question: str, context: Sequence[Hit]) -> str:
        passages = "\n\n".join(f"[{h.chunk_id}] {h.text}" for h in context)
        return self.template.replace("{context}", passages).replace("{question}", question)

    def generate(self, question: str, context: Sequence[Hit], best_score: float | None = None,
                 abstain: bool | None = None) -> Answer:
        """`best_score` and `abstain` are not used: the model reads the context and abstains in its reply."""
        reply = self.client.complete(self._prompt(question, context))
        answer = Answer(reply.text or "", [], False, self.name, self.model, self.prompt_version, dict(self.settings),
                        reply.prompt_tokens, reply.completion_tokens, attempts=reply.attempts, error=reply.error)
        if reply.text is None:
            return answer
        answer.cost = reply.prompt_tokens / 1000 * self.prices[0] + reply.completion_tokens / 1000 * self.prices[1]
        answer.citations = parse_citations(answer.text)
        answer.abstained = answer.text.rstrip(".").lower() == ABSTENTION.rstrip(".").lower()
        return answer


CLAIM_PROMPT = (
    "Does the passage support the claim? Answer with one word, yes or no.\n\n"
    "Passage:\n{passage}\n\nClaim: {claim}"
)


class LLMClaimJudge:
    """Claim-level citation support judged by a chat model: is this claim supported by the
    chunks it cites? Returns None when the model gives no usable verdict (counted apart)."""

    name = "llm-judge"

    def __init__(self, client: ChatClient) -> None:
        self.client = client

    def __call__(self, claim: str, passage: str) -> bool | None:
        reply = self.client.complete(CLAIM_PROMPT.replace("{passage}", passage).replace("{claim}", claim))
        word = (reply.text or "").strip().split(maxsplit=1)[0].strip(".,!").lower() if reply.text else ""
        return {"yes": True, "no": False}.get(word)


def make_generator(config: AnswersConfig, threshold: float) -> Generator:
    """The configured generator; the extractive one abstains under the evaluation's threshold."""
    if config.generator == "extractive":
        return ExtractiveGenerator(threshold, config.max_sentences)
    if config.generator == "openai-compatible":
        base_url, api_key = config.endpoint()
        return OpenAICompatibleGenerator(
            base_url, config.model, config.prompt, api_key, config.temperature, config.max_tokens,
            config.timeout_s, config.max_retries, price_per_1k_prompt=config.price_per_1k_prompt,
            price_per_1k_completion=config.price_per_1k_completion,
        )
    raise ConfigError(f"answers.generator {config.generator!r} makes no answers")


def make_claim_judge(config: AnswersConfig) -> LLMClaimJudge | None:
    """The LLM claim judge when configured; None means the lexical proxy."""
    if config.claim_judge != "llm":
        return None
    base_url, api_key = config.endpoint()
    return LLMClaimJudge(ChatClient(base_url, config.model, api_key, {"temperature": 0.0, "max_tokens": 3},
                                    config.timeout_s, config.max_retries))
