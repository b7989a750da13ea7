"""The Lightning callback, made for either package that ships Lightning: lightning.py builds it
over ``lightning.pytorch``, pytorch_lightning.py over ``pytorch_lightning`` (a Trainer accepts
only callbacks of its own package's Callback class). The work is _core.Watcher's."""
from __future__ import annotations

import logging
from typing import Any, Dict

from ._core import Options, Sink, Watcher

log = logging.getLogger("tensorgc")


class LightningSink(Sink):
    """Every logger the trainer has (trainer.loggers): scalars through log_metrics, text where
    the logger's experiment has add_text (TensorBoard). Lightning's loggers write on rank 0 only.
    A trainer without a logger: the report's table goes to logger "tensorgc" at INFO."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.said_none = False

    def scalars(self, values: Dict[str, float], step: int) -> None:
        loggers = list(getattr(self.trainer, "loggers", None) or [])
        if not loggers and not self.said_none:
            self.said_none = True
            log.info("tensorgc: the trainer has no logger: tensorgc's numbers go to logger "
                     "'tensorgc' only")
        for lg in loggers:
            lg.log_metrics(values, step=step)

    def text(self, tag: str, text: str, step: int) -> None:
        loggers = list(getattr(self.trainer, "loggers", None) or [])
        if not loggers:
            log.info("%s at step %d:\n%s", tag, step, text)
            return
        if not getattr(self.trainer, "is_global_zero", True):
            return
        for lg in loggers:
            add_text = getattr(getattr(lg, "experiment", None), "add_text", None)
            if callable(add_text):
                add_text(tag, text, global_step=step)


def make_callback(pl: Any) -> type:
    """The TensorGC callback class over the Lightning package ``pl``."""

    class TensorGC(pl.Callback):  # type: ignore[misc]
        """tensorgc in a Lightning run: ``Trainer(callbacks=[TensorGC()])``.

        Starts at fit's first training batch and stops at its end: the cycle detector with its
        pages, the OOM autopsy (CUDA, each rank), the allocator's cheap history, slow-leak
        forecasts, and a memory report at the first step and every ``report_every`` steps, all
        logged to the trainer's loggers. Keyword arguments: tensorgc.integrations._core.Options
        (docs/integrations/lightning.md)."""

        def __init__(self, **options: Any) -> None:
            super().__init__()
            self.watcher = Watcher(Options(**options), name="tensorgc")
            self._log_dir: Any = None
            self._last_step = -1

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if stage == "fit" and self.watcher.options.directory is None:
                # trainer.log_dir broadcasts rank 0's directory: every rank calls setup here
                self._log_dir = self.watcher._guard("log directory", lambda: trainer.log_dir)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self._last_step = -1
            self.watcher._guard("start", lambda: self.watcher.start(
                pl_module, list(getattr(trainer, "optimizers", None) or []),
                LightningSink(trainer), self._log_dir))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            step = int(getattr(trainer, "global_step", 0))
            if step != self._last_step:  # an optimizer stepped (not an accumulation batch)
                self._last_step = step
                self.watcher.step(step)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.watcher.stop()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self.watcher.stop()

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            self.watcher.stop()

        def state_dict(self) -> Dict[str, Any]:
            return {}

    return TensorGC
