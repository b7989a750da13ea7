"""tensorgc in a Lightning run (``lightning.pytorch``): ``Trainer(callbacks=[TensorGC()])``.
For the ``pytorch_lightning`` package, tensorgc.integrations.pytorch_lightning. The callback is
made in _lightning_base.py; docs/integrations/lightning.md describes it."""
import lightning.pytorch as _pl

from ._lightning_base import make_callback

TensorGC = make_callback(_pl)
TensorGC.__module__ = __name__
TensorGC.__qualname__ = "TensorGC"
