"""Refusing a name helpfully: "did you mean llama3-8b?" for a near miss, a pointer otherwise.

Names are compared normalised (lowercase, without '-', '_', '.' or spaces), so `llama-3-8b`,
`Llama3_8B` and `llama3-8b` meet, and difflib ranks the close ones. A refusal never lists a
whole catalogue: the catalogue has its own route.
"""

import difflib
import re
from collections.abc import Iterable

_SEPARATORS = re.compile(r"[-_.\s]+")
# difflib's ratio for a near miss: 0.75 takes `bfloat` for bfloat16 and `h100sxm5` for h100-sxm,
# and leaves `gpt` (gpt2 is 0.86, so that one is taken) apart from unrelated names.
_CUTOFF = 0.75
_MAX_SUGGESTIONS = 3


def normalised(name: str) -> str:
    return _SEPARATORS.sub("", name.lower())


def near_misses(name: str, choices: Iterable[str]) -> list[str]:
    """The choices closest to `name`, best first: those equal to it once normalised, else
    difflib's close matches of the normalised names."""
    by_norm: dict[str, list[str]] = {}
    for choice in choices:
        by_norm.setdefault(normalised(choice), []).append(choice)
    key = normalised(name)
    if key in by_norm:
        return by_norm[key][:_MAX_SUGGESTIONS]
    # Names it begins (bfloat: bfloat16) before difflib's (float), which weighs length too.
    longer = [k for k in by_norm if key and k.startswith(key)]
    close = longer + difflib.get_close_matches(key, list(by_norm), n=_MAX_SUGGESTIONS, cutoff=_CUTOFF)
    close = list(dict.fromkeys(close))
    return [c for k in close for c in by_norm[k]][:_MAX_SUGGESTIONS]


def unknown(what: str, name: object, choices: Iterable[str], listing: str) -> str:
    """The message refusing `name` as a `what`: "unknown preset 'llama-3-8b': did you mean
    llama3-8b?", or a pointer to `listing` (where the choices are listed) when nothing is close."""
    shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "...'"
    if isinstance(name, str):
        close = near_misses(name, choices)
        if close:
            return f"unknown {what} {shown}: did you mean {' or '.join(close)}?"
    return f"unknown {what} {shown}: see {listing}"


def family(name: str, choices: Iterable[str]) -> list[str]:
    """The choices `name` names as a family: itself (any case), or those it begins up to a
    '-' (h100 -> h100-sxm, h100-pcie; tpu -> tpu-v5e, tpu-v5p)."""
    low = name.lower()
    choices = list(choices)
    exact = [c for c in choices if c.lower() == low]
    return exact or [c for c in choices if c.lower().startswith(low + "-")]
