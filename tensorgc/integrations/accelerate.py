"""tensorgc in a plain Accelerate loop: one line after ``accelerator.prepare``::

    watch = tensorgc.integrations.accelerate.watch(accelerator, model, optimizer)

It steps itself after each real optimizer step (a hook on the optimizer inside Accelerate's
wrapper, so accumulation steps do not count) and logs through ``accelerator.log`` to the trackers
of ``accelerator.init_trackers`` (text to the TensorBoard tracker's writer). A Trainer run under
``accelerate launch`` uses tensorgc.integrations.transformers instead. docs/integrations/accelerate.md
describes it."""
from __future__ import annotations

import logging
import weakref
from typing import Any, Dict, Optional

from ._core import Options, Sink, Watcher, torch_optimizer

log = logging.getLogger("tensorgc")


class AccelerateSink(Sink):
    """accelerator.log (its trackers, on the main process only) for scalars; the TensorBoard
    tracker's add_text for text. Without trackers, the tables go to logger "tensorgc" (INFO)."""

    def __init__(self, accelerator: Any) -> None:
        self.accelerator = accelerator

    def scalars(self, values: Dict[str, float], step: int) -> None:
        if getattr(self.accelerator, "trackers", None):
            self.accelerator.log(values, step=step)

    def text(self, tag: str, text: str, step: int) -> None:
        acc = self.accelerator
        if not getattr(acc, "trackers", None):
            log.info("%s at step %d:\n%s", tag, step, text)
            return
        if not getattr(acc, "is_main_process", True):
            return
        for t in acc.trackers:
            writer = getattr(t, "writer", None)
            if getattr(t, "name", None) == "tensorboard" and writer is not None:
                writer.add_text(tag, text, global_step=step)


class Watch:
    """What watch() returns: ``remove()`` (or ``with``) stops everything and removes the hook;
    ``step()`` steps by hand, for a loop whose optimizer tensorgc could not hook; ``watcher``
    the Watcher (its ``last_report``, ``forecast``, ``pages``)."""

    def __init__(self, watcher: Watcher, hook: Any) -> None:
        self.watcher = watcher
        self._hook = hook

    def step(self, at: Optional[int] = None) -> None:
        self.watcher.step(at)

    def remove(self) -> None:
        if self._hook is not None:
            try:
                self._hook.remove()
            except Exception:  # noqa: BLE001
                pass
            self._hook = None
        self.watcher.stop()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def watch(accelerator: Any, model: Any, optimizer: Any = None, **options: Any) -> Watch:
    """Starts tensorgc for this process's part of an Accelerate run. ``options``: as the other
    integrations take them (tensorgc.integrations._core.Options). Never raises once the options
    are checked: a part that fails is logged and left off."""
    watcher = Watcher(Options(**options), name="tensorgc")
    log_dir = None
    try:
        log_dir = getattr(accelerator, "logging_dir", None) or getattr(accelerator, "project_dir", None)
    except Exception:  # noqa: BLE001
        pass
    model = _unwrap(accelerator, model)
    watcher._guard("start", lambda: watcher.start(model, [optimizer], AccelerateSink(accelerator),
                                                  str(log_dir) if log_dir else None))
    hook = None
    inner = torch_optimizer(optimizer)
    if inner is not None and watcher.started:
        ref = weakref.ref(watcher)

        def after_step(opt: Any, args: Any, kwargs: Any) -> None:
            w = ref()
            if w is not None:
                w.step()

        hook = watcher._guard("optimizer hook", lambda: inner.register_step_post_hook(after_step))
    return Watch(watcher, hook)


def _unwrap(accelerator: Any, model: Any) -> Any:
    try:
        return accelerator.unwrap_model(model)
    except Exception:  # noqa: BLE001
        return getattr(model, "module", model)
