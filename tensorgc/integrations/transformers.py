"""tensorgc in a Hugging Face Trainer run: ``Trainer(..., callbacks=[TensorGCCallback()])`` (or
``trainer.add_callback(TensorGCCallback())``); docs/integrations/transformers.md describes it.

The numbers go where the Trainer's own logs go: the callback hands them to the Trainer's
callbacks' on_log (TensorBoard, Weights & Biases, ... as report_to chose) and to
state.log_history, as Trainer.log does; the tables go to the TensorBoard callback's writer as
text. It works the same under ``accelerate launch`` and torchrun."""
from __future__ import annotations

import logging
import sys
from typing import Any, Dict, Optional

from transformers import TrainerCallback

from ._core import Options, Sink, Watcher

log = logging.getLogger("tensorgc")


def _handler_of(callback: Any) -> Any:
    """The Trainer's CallbackHandler that is calling ``callback`` now (a few frames up, the
    call_event that runs this hook), or None. Its callbacks are the Trainer's loggers."""
    f: Any = sys._getframe(1)
    for _ in range(6):
        if f is None:
            return None
        if f.f_code.co_name == "call_event":
            h = f.f_locals.get("self")
            if callback in getattr(h, "callbacks", ()):
                return h
        f = f.f_back
    return None


class TrainerSink(Sink):
    """Scalars to every callback's on_log and to state.log_history (what Trainer.log does);
    text to the TensorBoard callback's writer where it has one. Without the handler (a Trainer
    that calls its callbacks another way) the scalars go to state.log_history only."""

    def __init__(self, handler: Any, args: Any, state: Any, control: Any,
                 callback: "TensorGCCallback") -> None:
        self.handler, self.args, self.state, self.control = handler, args, state, control
        self.callback = callback

    def scalars(self, values: Dict[str, float], step: int) -> None:
        self.state.log_history.append({**values, "step": step})
        if self.handler is None:
            return
        self.callback._in_log = True
        try:
            self.handler.on_log(self.args, self.state, self.control, dict(values))
        finally:
            self.callback._in_log = False

    def text(self, tag: str, text: str, step: int) -> None:
        if self.handler is None or not getattr(self.state, "is_world_process_zero", True):
            return
        for cb in getattr(self.handler, "callbacks", ()):
            writer = getattr(cb, "tb_writer", None)
            if writer is not None and callable(getattr(writer, "add_text", None)):
                writer.add_text(tag, text, step)


class TensorGCCallback(TrainerCallback):
    """tensorgc in a Trainer run: ``Trainer(..., callbacks=[TensorGCCallback()])``.

    From train's start to its end: the cycle detector with its pages, the OOM autopsy (CUDA,
    each rank), the allocator's cheap history, slow-leak forecasts, and a memory report at the
    first step and every ``report_every`` steps, logged where the Trainer logs. Keyword
    arguments: tensorgc.integrations._core.Options (docs/integrations/transformers.md)."""

    def __init__(self, **options: Any) -> None:
        self.watcher = Watcher(Options(**options), name="tensorgc")
        self._in_log = False
        self._sink: Optional[TrainerSink] = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        handler = self.watcher._guard("finding the Trainer's loggers", lambda: _handler_of(self))
        if handler is None:
            log.info("tensorgc: the Trainer's callbacks were not found: tensorgc's numbers go to "
                     "state.log_history only")
        self._sink = TrainerSink(handler, args, state, control, self)
        log_dir = getattr(args, "output_dir", None)
        self.watcher._guard("start", lambda: self.watcher.start(
            kwargs.get("model"), [kwargs.get("optimizer")], self._sink, log_dir))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._sink is not None:
            self._sink.state, self._sink.control = state, control
        self.watcher.step(int(getattr(state, "global_step", 0)))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.watcher.stop()
        self._sink = None
