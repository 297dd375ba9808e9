"""A progress line on stderr: rewritten in place on a terminal, else one line every `every`
items (a log file gets a few lines, not thousands of carriage returns)."""

import sys
import time

__all__ = ["Progress"]


class Progress:
    """`update(done)` after each step; `close()` ends the line. Shows items and items/s."""

    def __init__(self, what, total=None, every=1000, stream=None):
        self.what, self.total, self.every = what, total, every
        self.stream = stream or sys.stderr
        self.terminal = getattr(self.stream, "isatty", lambda: False)()
        self.start, self.shown, self.last_shown = time.perf_counter(), 0, 0.0

    def update(self, done):
        now = time.perf_counter()
        if self.terminal:
            if now - self.last_shown >= 0.2 or done == self.total:
                self.last_shown = now
                print("\r" + self.line(done), end="", file=self.stream, flush=True)
        elif done - self.shown >= self.every or done == self.total:
            self.shown = done
            print(self.line(done), file=self.stream, flush=True)

    def line(self, done):
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        of = f"/{self.total}" if self.total else ""
        return f"{self.what}: {done}{of} images, {rate:.1f} images/s"

    def close(self):
        if self.terminal:
            print(file=self.stream, flush=True)
