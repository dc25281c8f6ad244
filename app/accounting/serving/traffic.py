"""Serving traffic: when requests arrive, how long their prompts and outputs are, and which share
a prompt prefix.

Arrivals follow vLLM's serving benchmark (vllm/benchmarks/serve.py, `get_request`, vLLM 0.11.0):
the gaps between requests are gamma-distributed with shape `burstiness` and mean 1/rate, so
burstiness 1 is a Poisson process and less than 1 is burstier. Lengths are fixed, uniform (as the
benchmark's random dataset draws them: integers in [L(1-r), L(1+r)], vllm/benchmarks/datasets.py
`RandomDataset`, defaults 1024 prompt and 128 output tokens) or log-normal; or a trace gives every
request's arrival and lengths. Everything is drawn from one `random.Random(seed)`: a seed gives the
same requests on every machine.
"""

import csv
import io
import json
import math
import random
from dataclasses import dataclass
from typing import Literal

from app.accounting.errors import InvalidInput

Distribution = Literal["fixed", "uniform", "lognormal"]
TRACE_MAX_ROWS = 200_000
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")

VLLM_RANDOM_PROMPT_TOKENS = 1024
VLLM_RANDOM_OUTPUT_TOKENS = 128
"""vLLM's random dataset defaults (--random-input-len, --random-output-len), vllm/benchmarks/datasets.py."""


@dataclass(frozen=True, slots=True)
class Lengths:
    """Tokens per request, drawn independently for each one."""

    distribution: Distribution
    mean: float
    """fixed: the value; uniform: the centre L; lognormal: the mean (not the median)."""
    spread: float = 0.0
    """uniform: vLLM's range ratio r in [0, 1); lognormal: sigma, the standard deviation of ln(tokens)."""
    minimum: int = 1
    maximum: int | None = None

    def draw(self, rng: random.Random) -> int:
        if self.distribution == "fixed":
            value = round(self.mean)
        elif self.distribution == "uniform":  # vLLM: integers on [floor(L(1-r)), ceil(L(1+r))]
            value = rng.randint(
                math.floor(self.mean * (1 - self.spread)), math.ceil(self.mean * (1 + self.spread))
            )
        else:  # ln(tokens) ~ N(mu, sigma) with mean exp(mu + sigma^2 / 2) = mean
            mu = math.log(self.mean) - self.spread**2 / 2
            value = round(rng.lognormvariate(mu, self.spread))
        top = self.maximum if self.maximum is not None else value
        return min(max(value, self.minimum), top)


@dataclass(frozen=True, slots=True)
class Requests:
    """The requests in arrival order, column by column (seconds and tokens)."""

    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    prefix_group: tuple[int, ...]
    """Which shared prefix each prompt starts with (-1: none); its length is prefix_tokens."""
    prefix_tokens: int = 0

    def __len__(self) -> int:
        return len(self.arrival_s)

    def select(self, indices: range | list[int]) -> "Requests":
        pick = list(indices)
        return Requests(
            tuple(self.arrival_s[i] for i in pick),
            tuple(self.prompt_tokens[i] for i in pick),
            tuple(self.output_tokens[i] for i in pick),
            tuple(self.prefix_group[i] for i in pick),
            self.prefix_tokens,
        )


def generate(
    *,
    rate_per_s: float,
    count: int,
    prompt: Lengths,
    output: Lengths,
    burstiness: float = 1.0,
    prefix_tokens: int = 0,
    prefix_groups: int = 0,
    seed: int = 0,
) -> Requests:
    """`count` requests at `rate_per_s` on average. With `prefix_groups`, each prompt starts with one of
    that many shared prefixes of `prefix_tokens` (a system prompt, a few-shot header), picked uniformly;
    its drawn length comes after the prefix, as vLLM's random dataset prepends --random-prefix-len."""
    rng = random.Random(seed)
    t, arrivals, prompts, outputs, groups = 0.0, [], [], [], []
    scale = 1.0 / (rate_per_s * burstiness)
    for _ in range(count):
        t += rng.gammavariate(burstiness, scale)
        arrivals.append(t)
        prompts.append(prompt.draw(rng) + (prefix_tokens if prefix_groups else 0))
        outputs.append(output.draw(rng))
        groups.append(rng.randrange(prefix_groups) if prefix_groups else -1)
    return Requests(
        tuple(arrivals), tuple(prompts), tuple(outputs), tuple(groups), prefix_tokens if prefix_groups else 0
    )


def parse_trace(text: str, *, field: str = "trace") -> Requests:
    """A trace as CSV (a header naming arrival_s, prompt_tokens and output_tokens) or JSON Lines (one
    object a line with those keys). Arrivals are seconds from any origin and need not be sorted;
    refused naming the row and column of the first bad value."""
    stripped = text.lstrip()
    if not stripped:
        raise InvalidInput(field, "is empty: give a header and at least one request")
    rows = _jsonl(stripped, field) if stripped.startswith("{") else _csv(stripped, field)
    if len(rows) > TRACE_MAX_ROWS:
        raise InvalidInput(field, f"has {len(rows)} requests; at most {TRACE_MAX_ROWS} are simulated")
    parsed = [_row(values, n, field) for n, values in rows]
    parsed.sort(key=lambda r: r[0])
    origin = parsed[0][0]
    return Requests(
        tuple(a - origin for a, _, _ in parsed),
        tuple(p for _, p, _ in parsed),
        tuple(o for _, _, o in parsed),
        (-1,) * len(parsed),
    )


def _csv(text: str, field: str) -> list[tuple[int, dict]]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise InvalidInput(
            field, f"row 1 (the header) lacks the column {missing[0]!r}; it needs {', '.join(TRACE_COLUMNS)}"
        )
    rows = [(n, row) for n, row in enumerate(reader, start=2) if any((v or "").strip() for v in row.values())]
    if not rows:
        raise InvalidInput(field, "has a header but no request")
    return rows


def _jsonl(text: str, field: str) -> list[tuple[int, dict]]:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            raise InvalidInput(field, f"row {n} is not a JSON object") from None
        if not isinstance(value, dict):
            raise InvalidInput(field, f"row {n} is not a JSON object")
        rows.append((n, value))
    return rows


def _row(values: dict, n: int, field: str) -> tuple[float, int, int]:
    out = []
    for column in TRACE_COLUMNS:
        raw = values.get(column)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            raise InvalidInput(field, f"row {n}, column {column}: missing")
        try:
            number = float(raw)
        except (TypeError, ValueError):
            raise InvalidInput(field, f"row {n}, column {column}: {raw!r} is not a number") from None
        if column == "arrival_s":
            if not math.isfinite(number) or number < 0:
                raise InvalidInput(field, f"row {n}, column {column}: {raw!r} is not a time >= 0 in seconds")
            out.append(number)
        else:
            if not number.is_integer() or not 1 <= number <= 10_000_000:
                raise InvalidInput(
                    field,
                    f"row {n}, column {column}: {raw!r} is not a whole number of tokens from 1 to 10,000,000",
                )
            out.append(int(number))
    return out[0], out[1], out[2]
