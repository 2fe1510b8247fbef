"""The denoising progress bar: tqdm's when it is installed (as diffusers shows it), else a plain one
on stderr. Both take the options of ``FluxPipeline.set_progress_bar_config``."""

from __future__ import annotations

import sys
import time
from typing import Any


class SimpleBar:
    """A one-line bar redrawn in place ("denoising [#####....] 3/8 1.52 it/s"), without tqdm."""

    def __init__(self, total: int, desc: str | None = None, file: Any = None, leave: bool = True,
                 disable: bool = False, ncols: int | None = None, **_: Any) -> None:
        self.total = total
        self.n = 0
        self.desc = "denoising" if desc is None else desc
        self.file = sys.stderr if file is None else file
        self.leave = leave
        self.disable = disable
        self.width = 24 if ncols is None else max(8, ncols - 40)
        self.start = time.monotonic()
        self._draw()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw()

    def _draw(self) -> None:
        if self.disable:
            return
        elapsed = time.monotonic() - self.start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        filled = self.width * self.n // max(self.total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        self.file.write(f"\r{self.desc} [{bar}] {self.n}/{self.total} {rate:.2f} it/s")
        self.file.flush()

    def close(self) -> None:
        if self.disable:
            return
        self.file.write("\n" if self.leave else "\r\033[K")
        self.file.flush()


def make_bar(total: int, config: dict[str, Any]) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return SimpleBar(total, **config)
    return tqdm(total=total, **config)
