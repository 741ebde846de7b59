"""Scorers the server runs in its event loop instead of a worker: an allow-list, each entry reviewed.

Scoring in a worker costs a process round trip per step; for a cheap scorer that round trip is
most of an episode's cost. A dataset's ``score_answer`` runs inline only when it is on the list
below, and only for answers of at most ``INLINE_ANSWER_CHARS`` characters (longer ones go to a
worker, as every other dataset's do). An entry is admitted when its code, read against the pinned
reasoning-gym, (1) reads nothing of the dataset object (it is called with ``self=None``, so a
scorer that does fails loudly instead of scoring wrong), and (2) is a fixed number of linear passes
over the answer and the server-generated oracle: string comparison, ``strip``/``lower``/``replace``,
substring search, ``Decimal`` parsing and comparison. No parsing of structure (JSON, ``eval``,
sympy), no arithmetic whose cost grows with the value of a number. The tests pin each entry's source
(``tests/unit/test_reasoning_gym_scoring.py``): a reasoning-gym upgrade that changes a scorer fails
them until the entry is read again. The measured worst case is in docs/benchmarks.md.
"""

from collections.abc import Callable
from typing import Any

from reasoning_gym.factory import DATASETS

# Longest answer scored inline; also the cost bound of every entry below (linear in it).
INLINE_ANSWER_CHARS = 4096

Scorer = Callable[[str, dict[str, Any]], float]

# Dataset classes whose own ``score_answer`` is bounded as described above, with why.
BOUNDED_SCORERS: dict[str, str] = {
    # Every dataset on reasoning-gym's base scorer (exact match, else the oracle's share of an
    # answer that contains it).
    "reasoning_gym.dataset.ProceduralDataset.score_answer": "equality, then substring search",
    # compute_decimal_reward: strip commas, Decimal(answer) == Decimal(oracle), else substring share.
    # Decimal parsing is linear in the digits; comparing two Decimals aligns exponents only when
    # their adjusted exponents are equal, a shift bounded by the answer's digit count.
    "reasoning_gym.arithmetic.chain_sum.ChainSumDataset.score_answer": "decimal parse and compare, substring",
    "reasoning_gym.arithmetic.products.ProductsDataset.score_answer": "decimal parse and compare, substring",
    # strip().lower() on both sides, then equality.
    "reasoning_gym.graphs.family_relationships.FamilyRelationshipsDataset.score_answer": "strip, lower, equality",
    "reasoning_gym.cognition.color_cube_rotation.ColorCubeRotationDataset.score_answer": "strip, lower, equality",
    # equality, then equality after strip().
    "reasoning_gym.logic.circuit_logic.CircuitLogicDataset.score_answer": "equality, strip, equality",
}


def scorer_name(function: Callable) -> str:
    """A scorer's dotted name, as ``BOUNDED_SCORERS`` lists it."""
    return f"{function.__module__}.{function.__qualname__}"


def inline_scorer(dataset_name: str) -> Scorer | None:
    """The dataset's own ``score_answer`` as ``(answer, entry) -> score`` when it is on the
    allow-list, else None (score in a worker). ``composite`` always scores in a worker."""
    registered = DATASETS.get(dataset_name)
    if registered is None:
        return None
    function = registered[0].score_answer
    if scorer_name(function) not in BOUNDED_SCORERS:
        return None
    return lambda answer, entry: float(function(None, answer=answer, entry=entry))
