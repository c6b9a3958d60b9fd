"""`with` for what runs until stop() (Runtime, WorldRuntime, WorldProcess): one definition of what leaving the block
does."""

from __future__ import annotations

from typing import Self


class StopsOnExit:
    """Leaving the `with` block stops it: after the queued iterations when the block ended normally, at once
    (drain=False) when an error left it. An error while stopping then becomes a note on the block's error, which is
    the one to see. The class has stop(drain, timeout); `_stopping` names what stops, for that
    note."""

    _stopping = "the runtime"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.stop()
            return
        try:
            self.stop(drain=False)  # an error left the block: the queued iterations are not waited for
        except Exception as again:  # noqa: BLE001 - the block's error is the one to see
            exc.add_note(f"stopping {self._stopping} after it: {again}")
