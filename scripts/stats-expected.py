#!/usr/bin/python3
"""Expected values for dmalab's statistics tests, computed with scipy.

Writes crates/dmalab-run/tests/data/stats-expected.json. Rerun after
changing a case:  /usr/bin/python3 scripts/stats-expected.py
(Debian python3-scipy; the output is committed, so the tests need no
Python.) Each case holds two samples (plain, loaded) and what scipy says
about them: mean, median, sd (ddof=1), the 95% percentile-bootstrap
interval of each mean and of the ratio mean(loaded)/mean(plain) (10,000
resamples; dmalab uses its own seeded generator, so the tests compare
bootstrap intervals with a tolerance), and the Mann-Whitney U test of
loaded against plain, two-sided, exact (where there are no ties) and
asymptotic with continuity and tie correction; and, for three samples
(plain, control, loaded), the DMA-attributable share and the slowdown
against the control with their bootstrap intervals.
"""
import json
import os

import numpy as np
import scipy
from scipy import stats

rng = np.random.default_rng(20261122)


def case(name, plain, loaded):
    plain = [float(v) for v in plain]
    loaded = [float(v) for v in loaded]
    x, y = np.array(plain), np.array(loaded)
    out = {"name": name, "plain": plain, "loaded": loaded}
    for key, a in (("plain", x), ("loaded", y)):
        ci = stats.bootstrap((a,), np.mean, n_resamples=10000, method="percentile",
                             confidence_level=0.95, random_state=rng).confidence_interval
        out[key + "_stats"] = {
            "mean": float(np.mean(a)),
            "median": float(np.median(a)),
            "sd": float(np.std(a, ddof=1)),
            "ci_lo": float(ci.low),
            "ci_hi": float(ci.high),
        }
    ratio = stats.bootstrap((y, x), lambda a, b, axis=-1: np.mean(a, axis=axis) / np.mean(b, axis=axis),
                            n_resamples=10000, method="percentile", paired=False, vectorized=True,
                            confidence_level=0.95, random_state=rng).confidence_interval
    out["ratio"] = float(np.mean(y) / np.mean(x))
    out["ratio_ci"] = [float(ratio.low), float(ratio.high)]
    ties = len(set(plain + loaded)) < len(plain) + len(loaded)
    asym = stats.mannwhitneyu(y, x, alternative="two-sided", method="asymptotic", use_continuity=True)
    out["mwu_u"] = float(asym.statistic)
    out["mwu_p_asymptotic"] = float(asym.pvalue)
    if not ties:
        ex = stats.mannwhitneyu(y, x, alternative="two-sided", method="exact")
        out["mwu_p_exact"] = float(ex.pvalue)
    out["ties"] = ties
    return out


cases = [
    case("small_no_ties", [10.1, 10.4, 9.8, 10.0, 10.2], [10.9, 11.3, 10.5, 10.8, 11.6]),
    case("ten_runs_thesis_like",
         np.round(rng.normal(100.0, 2.0, 10), 3), np.round(rng.normal(104.0, 2.5, 10), 3)),
    case("overlapping", np.round(rng.normal(50.0, 5.0, 10), 2), np.round(rng.normal(51.0, 5.0, 10), 2)),
    case("ties", [1, 2, 2, 3, 3, 3, 4, 5, 5, 6, 7, 7], [2, 3, 4, 4, 5, 6, 6, 7, 8, 8, 9, 9, 9, 10, 11]),
    case("unequal_sizes", [3.1, 2.9, 3.3, 3.0], [3.6, 3.4, 3.9, 3.2, 3.8, 3.5, 4.0]),
    case("larger_asymptotic", np.round(rng.lognormal(0.0, 0.3, 30), 4), np.round(rng.lognormal(0.1, 0.3, 25), 4)),
]



def attribution(name, plain, control, loaded):
    """A loaded sample against its control and plain: the DMA-attributable
    share (mean(loaded) - mean(control)) / (mean(loaded) - mean(plain)) and
    the ratio mean(loaded) / mean(control), each with its 95% percentile
    bootstrap interval, the samples resampled independently."""
    plain, control, loaded = ([float(v) for v in s] for s in (plain, control, loaded))
    p, c, l = np.array(plain), np.array(control), np.array(loaded)

    def share(l, c, p, axis=-1):
        ml, mc, mp = (np.mean(x, axis=axis) for x in (l, c, p))
        return (ml - mc) / (ml - mp)

    ci = stats.bootstrap((l, c, p), share, n_resamples=10000, method="percentile", paired=False,
                         vectorized=True, confidence_level=0.95, random_state=rng).confidence_interval
    ratio = stats.bootstrap((l, c), lambda a, b, axis=-1: np.mean(a, axis=axis) / np.mean(b, axis=axis),
                            n_resamples=10000, method="percentile", paired=False, vectorized=True,
                            confidence_level=0.95, random_state=rng).confidence_interval
    return {"name": name, "plain": plain, "control": control, "loaded": loaded,
            "share": float(share(l, c, p)), "share_ci": [float(ci.low), float(ci.high)],
            "vs_control": float(np.mean(l) / np.mean(c)),
            "vs_control_ci": [float(ratio.low), float(ratio.high)]}


attribution_cases = [
    # The control costs the victim little: most of the slowdown is DMA.
    attribution("mostly_dma", np.round(rng.normal(100.0, 2.0, 10), 3),
                np.round(rng.normal(102.0, 2.0, 10), 3), np.round(rng.normal(130.0, 3.0, 10), 3)),
    # The control slows the victim as much as the load: no DMA effect.
    attribution("cpu_cost_only", np.round(rng.normal(100.0, 2.0, 8), 3),
                np.round(rng.normal(125.0, 3.0, 8), 3), np.round(rng.normal(125.0, 3.0, 8), 3)),
    # Half and half, unequal sizes.
    attribution("half", np.round(rng.normal(50.0, 1.0, 6), 3),
                np.round(rng.normal(60.0, 1.5, 9), 3), np.round(rng.normal(70.0, 1.5, 7), 3)),
]

path = os.path.join(os.path.dirname(__file__), "..", "crates", "dmalab-run", "tests", "data",
                    "stats-expected.json")
with open(path, "w") as f:
    json.dump({"generator": "scripts/stats-expected.py", "scipy": scipy.__version__,
               "numpy": np.__version__, "cases": cases,
               "attribution_cases": attribution_cases}, f, indent=1)
    f.write("\n")
print("wrote", os.path.normpath(path), "with", len(cases), "cases (scipy", scipy.__version__ + ")")
