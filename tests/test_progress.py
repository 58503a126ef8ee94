"""The sweep's progress bar: counts, the trial running now, skipped trials leaving the total, quiet mode."""

from __future__ import annotations

import io
import logging

from experiments.plan import Trial
from experiments.run.progress import SweepProgress, sweep_progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _trials(n: int) -> list[Trial]:
    return [Trial("local", "m", "pytorch", "pytorch", "http", "tensor", 1, c) for c in range(1, n + 1)]


def test_bar_shows_progress_current_trial_and_skips() -> None:
    out = FakeTerminal()
    trials = _trials(4)
    progress = SweepProgress(trials, "local", file=out)
    assert progress.bar.postfix == trials[0].name
    progress.finished(trials[0], skipped=True)
    assert (progress.bar.n, progress.bar.total) == (0, 3)
    progress.finished(trials[1], skipped=False)
    assert (progress.bar.n, progress.bar.total) == (1, 3)
    assert progress.bar.postfix == f"{trials[2].name}, 1 skipped"
    progress.finished(trials[2], skipped=False)
    progress.finished(trials[3], skipped=False)
    progress.close()
    text = out.getvalue()
    assert "3/3" in text and "local/pytorch/http/tensor/b1/c3" in text and "<00:00" in text


def test_quiet_and_non_terminals_get_no_bar(caplog) -> None:
    for quiet, file in ((True, FakeTerminal()), (False, io.StringIO())):
        progress = SweepProgress(_trials(2), "local", quiet=quiet, file=file)
        progress.finished(_trials(2)[0], skipped=False)
        progress.close()
        assert progress.bar.disable and file.getvalue() == ""
    with caplog.at_level(logging.INFO), sweep_progress(_trials(1), "local", quiet=True) as progress:
        logging.getLogger("tierbench.test").info("a log line still shows")
        progress.finished(_trials(1)[0], skipped=False)
    assert "a log line still shows" in caplog.text
