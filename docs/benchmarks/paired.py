#!/usr/bin/env python3
"""Per-round ratios between two implementations in interleaved benchmark runs.

Usage: paired.py FILE BASE OTHER METRIC [SUBSTRING]

FILE holds rounds of `go test -bench ... -count 1` output appended one after
another, so that the i-th result of a case is round i for every
implementation. For each case (the benchmark name without its impl= key)
this prints the median of OTHER/BASE over the rounds, a distribution-free
confidence interval for that median (order statistics of the ratios, at
least 95% coverage), and the two-sided exact Wilcoxon signed-rank p-value of
the log ratios. METRIC is a unit as the file spells it: ns/op, p50-µs,
okops/s... Only cases whose name contains SUBSTRING are shown.

Pairing by round cancels the machine's slow drift in load, which an
unpaired test (benchstat's Mann-Whitney U) counts as noise. Standard
library only.
"""

import math
import re
import statistics
import sys
from collections import defaultdict


def results(path, metric, substring):
    """Returns {(case, impl): [value per round]} for metric."""
    out = defaultdict(list)
    for line in open(path, encoding="utf-8"):
        if not line.startswith("Benchmark"):
            continue
        fields = line.split()
        m = re.match(r"Benchmark(.*)/impl=([^/]+?)-\d+$", fields[0])
        if not m or substring not in fields[0]:
            continue
        values = {fields[i + 1]: float(fields[i]) for i in range(2, len(fields) - 1, 2)}
        if metric in values:
            out[m.groups()].append(values[metric])
    return out


def median_ci(sorted_xs):
    """The widest-inward order-statistic interval with coverage >= 95%."""
    n = len(sorted_xs)
    best = (0, 1.0)
    for k in range(n // 2):
        tail = sum(math.comb(n, j) for j in range(k + 1)) / 2**n
        if 1 - 2 * tail >= 0.95:
            best = (k + 1, 1 - 2 * tail)
    k, coverage = best
    if k == 0:
        return sorted_xs[0], sorted_xs[-1], 1.0
    return sorted_xs[k - 1], sorted_xs[n - k], coverage


def signed_rank_p(diffs):
    """Exact two-sided Wilcoxon signed-rank p-value (zeros dropped)."""
    d = [x for x in diffs if x != 0]
    n = len(d)
    if n == 0:
        return 1.0
    order = sorted(range(n), key=lambda i: abs(d[i]))
    rank = [0] * n
    for r, i in enumerate(order, 1):
        rank[i] = r
    w = sum(rank[i] for i in range(n) if d[i] > 0)
    counts = {0: 1}  # distribution of W under the null, by enumeration
    for r in range(1, n + 1):
        nxt = defaultdict(int)
        for s, c in counts.items():
            nxt[s] += c
            nxt[s + r] += c
        counts = nxt
    mean = n * (n + 1) / 4
    extreme = sum(c for s, c in counts.items() if abs(s - mean) >= abs(w - mean) - 1e-9)
    return min(1.0, extreme / 2**n)


def main():
    path, base, other, metric = sys.argv[1:5]
    substring = sys.argv[5] if len(sys.argv) > 5 else ""
    res = results(path, metric, substring)
    cases = list(dict.fromkeys(case for case, _ in res))
    for case in cases:
        a, b = res.get((case, base)), res.get((case, other))
        if not a or not b:
            continue
        n = min(len(a), len(b))
        ratios = sorted(b[i] / a[i] for i in range(n))
        lo, hi, cov = median_ci(ratios)
        p = signed_rank_p([math.log(b[i] / a[i]) for i in range(n)])
        print(f"{case:34s} {metric:8s} {other}/{base} = {statistics.median(ratios):.2f} "
              f"[{lo:.2f}, {hi:.2f}] ({cov:.0%} CI)  p={p:.3f}  n={n}")


if __name__ == "__main__":
    main()
