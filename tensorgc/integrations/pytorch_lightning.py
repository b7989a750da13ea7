"""tensorgc in a ``pytorch_lightning`` run: ``Trainer(callbacks=[TensorGC()])``, the same
callback as tensorgc.integrations.lightning over that package's Callback class."""
import pytorch_lightning as _pl

from ._lightning_base import make_callback

TensorGC = make_callback(_pl)
TensorGC.__module__ = __name__
TensorGC.__qualname__ = "TensorGC"
