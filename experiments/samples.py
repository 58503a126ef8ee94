"""Raw per-request samples of one measurement window, as returned by client actors and merged exactly."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class WindowSamples:
    """Requests that completed inside [window_start, window_end] (epoch seconds), from one or more actors."""

    window_start: float
    window_end: float
    images_per_request: int
    send_s: np.ndarray  # epoch seconds each request was sent
    latency_s: np.ndarray  # completion - send
    actor: np.ndarray  # index of the client actor that sent it
    errors: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.window_end - self.window_start

    @property
    def requests(self) -> int:
        return int(self.latency_s.size)

    @staticmethod
    def merge(parts: list[WindowSamples]) -> WindowSamples:
        """Concatenate the raw samples of actors that measured the same window (never average percentiles)."""
        if not parts:
            raise ValueError("nothing to merge")
        first = parts[0]
        for part in parts[1:]:
            if (part.window_start, part.window_end, part.images_per_request) != (
                first.window_start, first.window_end, first.images_per_request
            ):
                raise ValueError("client actors measured different windows or batch sizes")
        order = np.argsort(np.concatenate([p.send_s for p in parts]), kind="stable")
        return WindowSamples(
            window_start=first.window_start,
            window_end=first.window_end,
            images_per_request=first.images_per_request,
            send_s=np.concatenate([p.send_s for p in parts])[order],
            latency_s=np.concatenate([p.latency_s for p in parts])[order],
            actor=np.concatenate([p.actor for p in parts])[order],
            errors=[e for p in parts for e in p.errors],
        )
