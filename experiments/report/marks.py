"""Marks on figures that need a caveat, wherever a table or plot shows them: † a trial whose windows never
agreed within the stability rule (perf_analyzer warns of such a figure, LoadGen invalidates the run), ‡ an
open-loop trial its server fell behind (overloaded: its latency only grows with the trial's length, and it
is left out of every cost figure), § a trial measured by another load engine than the report's others (its client
is not theirs: set beside them, the difference may be the client's)."""

from __future__ import annotations

import numpy as np
import pandas as pd

UNSTABLE = "†"
OVERLOADED = "‡"
OTHER_ENGINE = "§"
MEANING = {
    UNSTABLE: "unstable (its measurement windows never agreed within the stability rule)",
    OVERLOADED: "overloaded (completions fell behind arrivals)",
    OTHER_ENGINE: "measured by another load engine than the other figures (`load_engine`): compare it with figures "
                  "of its own engine",
}


def other_engine(engines: pd.Series) -> pd.Series:
    """Per trial: measured by another engine than most of the report's trials. Trials that predate the
    `load_engine` param were all measured by the Python client."""
    engines = engines.fillna("python").astype(str)
    if engines.nunique() < 2:
        return pd.Series(False, index=engines.index)
    return engines != engines.value_counts().index[0]


def trial_marks(unstable: pd.Series, overloaded: pd.Series, another_engine: pd.Series | None = None) -> pd.Series:
    """Per trial: its marks, '' when none."""
    marks = unstable.map({True: UNSTABLE, False: ""}) + overloaded.map({True: OVERLOADED, False: ""})
    if another_engine is not None:
        marks = marks + another_engine.map({True: OTHER_ENGINE, False: ""})
    return marks


def merge(a: pd.Series, b: pd.Series) -> pd.Series:
    """The marks of a figure computed from two trials (a ratio): both trials' marks; NaN where either is
    missing (as the ratio is)."""
    return (a + b).map(lambda m: "".join(c for c in MEANING if c in m) if isinstance(m, str) else m)


def legend(marks: pd.DataFrame | pd.Series, what: str = "figures") -> str | None:
    """What the marks in a table mean and how many of its `what` carry each; None when it carries none.
    `marks` holds one string per figure (NaN where the table has no figure). Counted in plain Python: a large
    sweep's report has thousands of tables."""
    cells = [str(cell) for cell in np.ravel(marks.to_numpy()) if not pd.isna(cell)]
    parts = [f"{mark} {meaning}: {n} of {len(cells)} {what}" for mark, meaning in MEANING.items()
             if (n := sum(mark in cell for cell in cells))]
    return "; ".join(parts) + "." if parts else None


def suffix(mark: object) -> str:
    """A cell's marks as they follow its formatted figure: ' †', or '' when it has none (NaN included)."""
    return f" {mark}" if isinstance(mark, str) and mark else ""
