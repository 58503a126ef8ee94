"""One progress bar over a tier's trials (tqdm): done / total, the trial running now, elapsed and ETA.

Log lines go through `tqdm.write` while the bar is shown, so they don't tear it. Off with `quiet=true`
(CI) and whenever stderr is not a terminal; the per-trial log lines stay either way.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from experiments.plan import Trial


class SweepProgress:
    """Counts finished trials. Skipped ones finish instantly: they leave the bar's total rather than
    counting as done, so the ETA reflects the trials that are really measured."""

    def __init__(self, trials: list[Trial], desc: str, quiet: bool = False, file: Any = None) -> None:
        from tqdm import tqdm

        self.pending = [t.name for t in trials]
        self.skipped = 0
        disable = True if quiet else None  # None: tqdm turns itself off when stderr is not a terminal
        self.bar = tqdm(total=len(trials), desc=desc, unit="trial", disable=disable, dynamic_ncols=True,
                        file=file or sys.stderr, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]"
                                                    "{postfix}")
        self._show_current()

    def finished(self, trial: Trial, skipped: bool) -> None:
        if trial.name in self.pending:
            self.pending.remove(trial.name)
        if skipped:
            self.skipped += 1
            self.bar.total -= 1
            self.bar.refresh()
        else:
            self.bar.update(1)
        self._show_current()

    def _show_current(self) -> None:
        """Trials run in plan order (a group's skipped trials finish first, instantly), so the first one
        not finished yet is the one running (or whose server is starting)."""
        current = self.pending[0] if self.pending else "done"
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        self.bar.set_postfix_str(f"{current}{skipped}", refresh=True)

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def sweep_progress(trials: list[Trial], desc: str, quiet: bool = False) -> Iterator[SweepProgress]:
    """The bar, with logging redirected through it while it lives; always closed."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    progress = SweepProgress(trials, desc, quiet)
    redirect: Any = contextlib.nullcontext() if progress.bar.disable else logging_redirect_tqdm()
    try:
        with redirect:
            yield progress
    finally:
        progress.close()
