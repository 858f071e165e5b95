"""Prices per model, in one table, and the cost of a call's usage — cache-aware.

A call's usage is what the provider returned (Anthropic's ``usage``: ``input_tokens`` — the
uncached input —, ``cache_creation_input_tokens``, ``cache_read_input_tokens``, ``output_tokens``,
and, when the answer splits it, ``cache_creation.ephemeral_1h_input_tokens``). Each kind has its own
rate: cache writes cost 1.25× the input rate (5-minute TTL) or 2× (1-hour TTL), cache reads 0.1×, as
Anthropic lists them. Rates are US dollars per million tokens.

A model is matched by the first family whose pattern its id contains (the provider prefix of an
Instance AI model id, ``anthropic/…``, is dropped first); a model in no family is priced at
:data:`DEFAULT_PRICE` (Sonnet-class list prices, the defaults of n8n's ``build-cost-report.ts``) and
said so (:attr:`Priced.known` is False).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    cache_write_1h: float

    @classmethod
    def of(cls, input: float, output: float) -> Price:
        """A price with Anthropic's cache multipliers (5-minute write 1.25×, 1-hour write 2×, read 0.1×)."""
        return cls(input, output, round(input * 1.25, 6), round(input * 0.1, 6), input * 2)


@dataclass(frozen=True)
class Usage:
    """Tokens of one call (or a sum of calls), by kind; ``input`` is the uncached input."""

    input: int = 0
    output: int = 0
    cache_write: int = 0  # 5-minute cache writes (all writes when the answer does not split them)
    cache_read: int = 0
    cache_write_1h: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output, self.cache_write + other.cache_write,
                     self.cache_read + other.cache_read, self.cache_write_1h + other.cache_write_1h)

    @property
    def total(self) -> int:
        """Every token counted: input, output, cache writes and cache reads."""
        return self.input + self.output + self.cache_write + self.cache_read + self.cache_write_1h

    @property
    def counted(self) -> int:
        """What a provider's tokens-per-minute limit counts: everything but cache reads."""
        return self.total - self.cache_read

    def split(self, parts: int) -> list[Usage]:
        """``parts`` usages summing to this one exactly (the remainder goes to the first ones)."""
        def share(value: int) -> list[int]:
            base, extra = divmod(value, parts)
            return [base + (1 if i < extra else 0) for i in range(parts)]

        columns = [share(v) for v in (self.input, self.output, self.cache_write, self.cache_read, self.cache_write_1h)]
        return [Usage(*(c[i] for c in columns)) for i in range(parts)]

    def to_json(self) -> dict[str, int]:
        return {"input": self.input, "output": self.output, "cache_write": self.cache_write,
                "cache_read": self.cache_read, "cache_write_1h": self.cache_write_1h}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Usage:
        return cls(**{k: int(v) for k, v in data.items() if k in cls.__dataclass_fields__})


def _int(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def usage_of(raw: object) -> Usage:
    """A provider ``usage`` object (Anthropic's, or OpenAI's chat-completions one) as :class:`Usage`."""
    if not isinstance(raw, dict):
        return Usage()
    if "prompt_tokens" in raw or "completion_tokens" in raw:  # OpenAI-compatible
        details = raw.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        return Usage(input=max(0, _int(raw.get("prompt_tokens")) - cached), output=_int(raw.get("completion_tokens")),
                     cache_read=cached)
    writes = _int(raw.get("cache_creation_input_tokens"))
    split = raw.get("cache_creation")
    one_hour = _int(split.get("ephemeral_1h_input_tokens")) if isinstance(split, dict) else 0
    return Usage(input=_int(raw.get("input_tokens")), output=_int(raw.get("output_tokens")),
                 cache_write=max(0, writes - one_hour), cache_read=_int(raw.get("cache_read_input_tokens")),
                 cache_write_1h=one_hour)


#: Sonnet-class list prices: what an unknown model is priced at (n8n's build-cost-report defaults).
DEFAULT_PRICE = Price.of(3.0, 15.0)

#: (pattern in the model id, price), first match wins — more specific patterns first.
PRICES: tuple[tuple[str, Price], ...] = (
    ("opus-4-1", Price.of(15.0, 75.0)),
    ("opus-4-0", Price.of(15.0, 75.0)),
    ("opus-4-2025", Price.of(15.0, 75.0)),
    ("claude-opus-4-", Price.of(5.0, 25.0)),  # 4.5 and later
    ("claude-3-opus", Price.of(15.0, 75.0)),
    ("sonnet", Price.of(3.0, 15.0)),
    ("haiku-4", Price.of(1.0, 5.0)),
    ("3-5-haiku", Price.of(0.8, 4.0)),
    ("3-haiku", Price.of(0.25, 1.25)),
)


@dataclass(frozen=True)
class Priced:
    price: Price
    known: bool


def price_of(model: str | None) -> Priced:
    """The price of ``model`` by the first pattern of :data:`PRICES` its name contains (provider prefix
    dropped); the default price, marked unknown, when none does."""
    name = (model or "").lower().rsplit("/", 1)[-1]
    for pattern, price in PRICES:
        if pattern in name:
            return Priced(price, True)
    return Priced(DEFAULT_PRICE, False)


def cost_usd(model: str | None, usage: Usage) -> float:
    """What ``usage`` costs at ``model``'s price, in US dollars."""
    p = price_of(model).price
    return (usage.input * p.input + usage.output * p.output + usage.cache_write * p.cache_write
            + usage.cache_read * p.cache_read + usage.cache_write_1h * p.cache_write_1h) / 1_000_000


__all__ = ["DEFAULT_PRICE", "PRICES", "Price", "Priced", "Usage", "cost_usd", "price_of", "usage_of"]
