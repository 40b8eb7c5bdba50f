"""What every trainer shares: the stages run top to bottom (config, data, model, checkpoint, compile, loop), and the
locks taken on the way released however the run ends."""

from __future__ import annotations

from typing import Any


class StagedRun:
    """Subclasses define the six ``stage_*`` methods and append the locks they take to ``self.locks``."""

    locks: list[Any]

    def run(self) -> dict[str, Any]:
        try:
            self.stage_config()
            self.stage_data()
            self.stage_model()
            self.stage_checkpoint()
            self.stage_compile()
            return self.stage_loop()
        finally:
            self.release_locks()

    def release_locks(self) -> None:
        """The run directory's and the cache's locks (the kernel drops them too if the process dies)."""
        for lock in self.locks:
            lock.release()
        self.locks.clear()

    def stage_config(self) -> None: ...

    def stage_data(self) -> None: ...

    def stage_model(self) -> None: ...

    def stage_checkpoint(self) -> None: ...

    def stage_compile(self) -> None: ...

    def stage_loop(self) -> dict[str, Any]:
        raise NotImplementedError
