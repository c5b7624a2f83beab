"""The command-line frame the benchmarks share: the Redis a run uses, how it reports its
failures, and its printout written into its section of the results page."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.results_page import printed_into_section
from tooling.embedded_redis import EmbeddedRedis


@contextlib.contextmanager
def redis_url(given: str | None) -> Iterator[str]:
    """``given`` (``--redis-url``), else an embedded Redis 8 for the run's length."""
    if given:
        yield given
        return
    with EmbeddedRedis() as server:
        yield server.url


def reported(lines: Sequence[str], failures: Sequence[str], log_dir: Path) -> int:
    """Print the report and each failure; the exit status (1 when anything failed)."""
    print("\n".join(lines))
    for failure in failures:
        print(f"FAILURE: {failure}")
    print(f"worker logs: {log_dir}", file=sys.stderr)
    return 1 if failures else 0


def main_into_section(
    script: str,
    argv: Sequence[str] | None,
    parse: Callable[[Sequence[str] | None], argparse.Namespace],
    measure: Callable[[argparse.Namespace], int],
) -> int:
    """Parse, measure, and write what was printed into ``bench/<script>``'s section
    (``--results-page``; none with ``--no-results-page``)."""
    args = parse(argv)
    page = None if args.no_results_page else args.results_page
    given = list(argv if argv is not None else sys.argv[1:])
    with printed_into_section(script, given, page):
        return measure(args)


__all__ = ["main_into_section", "redis_url", "reported"]
