"""A tiny progress bar on stderr (no dependency): redrawn in place on a terminal, one line per task elsewhere."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """Counts weighted units of work (a calibration, a timed repeat, a set-up...) out of a known total.

    The weights estimate each unit's time, so the percentage and the ETA track the clock.
    """

    def __init__(self, total: float, stream: TextIO | None = None, enabled: bool = True, width: int = 28) -> None:
        self.total = max(1e-9, float(total))
        self.done = 0.0
        self.label = ""
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()
        self._last_draw = 0.0
        self._line_len = 0

    def set_label(self, label: str) -> None:
        """Name the task now running; off a terminal this prints one progress line."""
        self.label = label
        if self.enabled and not self.tty:
            self.stream.write(f"[{self._percent():3d}%] {_fmt_duration(self._elapsed())}{self._eta()} {label}\n")
            self.stream.flush()
        self._draw(force=True)

    def advance(self, units: float = 1.0) -> None:
        self.done = min(self.total, self.done + units)
        self._draw()

    def close(self) -> None:
        """Draw the finished bar and end its line."""
        self.done = self.total
        self.label = "done"
        if self.tty:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
        elif self.enabled:
            self.stream.write(f"[100%] {_fmt_duration(self._elapsed())} done\n")
            self.stream.flush()

    def _elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _eta(self) -> str:
        fraction = self.done / self.total
        if fraction < 0.03 or fraction >= 1:
            return ""
        return f" (eta {_fmt_duration(self._elapsed() * (1 - fraction) / fraction)})"

    def _percent(self) -> int:
        return int(100 * self.done / self.total)

    def _draw(self, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.perf_counter()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        filled = int(self.width * self.done / self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {self._percent():3d}% {_fmt_duration(self._elapsed())}{self._eta()} {self.label}"
        pad = " " * max(0, self._line_len - len(line))
        self._line_len = len(line)
        self.stream.write("\r" + line + pad)
        self.stream.flush()
