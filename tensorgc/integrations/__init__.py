"""tensorgc inside the training loops people already run, each added in one line:

    lightning           TensorGC, a Lightning Callback (``lightning.pytorch``)
    pytorch_lightning   the same for the ``pytorch_lightning`` package
    transformers        TensorGCCallback, a Hugging Face TrainerCallback
    accelerate          watch(accelerator, model, optimizer) for plain Accelerate loops
    notebooks           inline_timeline(): a snapshot's timeline in a notebook cell

Each is imported on demand (``from tensorgc.integrations.lightning import TensorGC``): this
package imports none of them, nor any training library. What they share is in _core.py;
docs/integrations/ has a page for each.
"""
