"""What a run spent on model calls: one record's cost, and totals where "unknown" is never $0.

A record's `cost_usd` is what its harness priced (agents/msa.py `call_cost`: the agent config's
price_per_token, else LiteLLM's price table). Where it is missing, an agent that calls no model
(the built-in, scripted and replay harnesses) or never took a step spent nothing; any other
agent's spend is unknown, and so is every total that includes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: harnesses that call no model: a record of theirs without a cost spent nothing
MODEL_FREE_HARNESSES = frozenset({"builtin", "scripted", "replay"})
UNKNOWN = "unknown"


def record_costs(
    cost_usd: Sequence[float | None], harness: Sequence[str | None], steps: Sequence[int | None]
) -> np.ndarray:
    """USD each record spent (the fields of its line), NaN where it is unknown."""
    cost = np.array(cost_usd, np.float64)  # None: NaN
    unknown = np.isnan(cost)
    if unknown.any():
        free = np.fromiter(map(MODEL_FREE_HARNESSES.__contains__, harness), bool, len(cost))
        stepped = np.fromiter(map(bool, steps), bool, len(cost))
        cost[unknown & (free | ~stepped)] = 0.0
    return cost


def total_of(costs: np.ndarray) -> float | str:
    """The sum of per-record costs (NaN: unknown), or "unknown" when any of them is unknown."""
    return UNKNOWN if np.isnan(costs).any() else math.fsum(costs.tolist())  # exact: any order


def cost_text(value: float | str | None) -> str:
    """A total as the tables show it: $0.1234, or "unknown"."""
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    return f"${value:,.4f}"


class SpendMeter:
    """The spend recorded in a results.jsonl after `offset` (its size when this invocation began),
    read incrementally: each call reads only the complete lines appended since the last one."""

    def __init__(self, path: Path, offset: int = 0):
        self.path, self.offset = Path(path), offset
        self.spent = 0.0
        self.unknown = 0  # records whose cost is unknown (they add nothing to `spent`)

    def read(self) -> float:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.spent
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        fields: list[tuple] = []
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
                fields.append(
                    (
                        float(rec.get("cost_usd")) if rec.get("cost_usd") is not None else None,
                        rec.get("harness"),
                        rec.get("steps"),
                    )
                )
            except (ValueError, AttributeError, TypeError):
                continue  # not a record: the report names it
        self.offset += end
        if fields:
            cost = record_costs(*zip(*fields))
            unknown = np.isnan(cost)
            self.unknown += int(unknown.sum())
            self.spent += math.fsum(cost[~unknown].tolist())
        return self.spent
