"""Training runs with a planted leak, each watched through one integration and nothing else of
tensorgc, for tests/test_integrations_*.py: ``python _integration_runs.py KIND OUT`` (or under
``accelerate launch``). KIND: lightning, lightning-ddp, pytorch-lightning, trainer, accelerate.

Every training step appends a tensor to the module's LEAK list (the slow leak: 16 KiB a step,
held by ``__main__.LEAK``) and drops a self-referencing Node that holds a tensor, then collects
(the cycle). The run writes its logger's files under OUT; the tests read them.
"""
import gc
import os
import sys

import torch

LEAK = []
STEPS = 4
# the device of the single-process runs: TENSORGC_TEST_DEVICE=cuda trains them on the GPU (the
# runs of two processes stay on the CPU, with gloo)
DEVICE = "cuda" if os.environ.get("TENSORGC_TEST_DEVICE", "").startswith("cuda") else "cpu"


class Node:
    pass


def plant(device="cpu"):
    LEAK.append(torch.zeros(4096, device=device))
    n = Node()
    n.self = n
    n.t = torch.zeros(1024, device=device)
    del n
    gc.collect()


def lightning(out, package="lightning", ddp=False):
    if package == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
        from tensorgc.integrations.lightning import TensorGC
    else:
        import pytorch_lightning as pl
        from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
        from tensorgc.integrations.pytorch_lightning import TensorGC

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(32, 32)

        def training_step(self, batch, i):
            plant(self.device)
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32)),
                                       batch_size=8)
    trainer = pl.Trainer(
        max_steps=STEPS, accelerator="gpu" if DEVICE == "cuda" and not ddp else "cpu",
        devices=2 if ddp else 1,
        strategy="ddp" if ddp else "auto",
        logger=[CSVLogger(out, name="csv"), TensorBoardLogger(out, name="tb")],
        callbacks=[TensorGC(report_every=2)],
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(Model(), data)


def trainer(out):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from tensorgc.integrations.transformers import TensorGCCallback

    class Leaky(GPT2LMHeadModel):
        def forward(self, *args, **kwargs):
            if self.training:
                plant(self.device)
            return super().forward(*args, **kwargs)

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    ids = torch.randint(0, 64, (16, 16), generator=torch.Generator().manual_seed(0))
    args = TrainingArguments(output_dir=out, max_steps=STEPS, per_device_train_batch_size=4,
                             logging_steps=2, report_to=["tensorboard"], save_strategy="no",
                             use_cpu=DEVICE == "cpu", disable_tqdm=True,
                             remove_unused_columns=False)
    Trainer(model=Leaky(config), args=args, train_dataset=[{"input_ids": r, "labels": r} for r in ids],
            callbacks=[TensorGCCallback(report_every=2)]).train()


def accelerate(out):
    from accelerate import Accelerator
    from tensorgc.integrations.accelerate import watch

    two = int(os.environ.get("WORLD_SIZE", "1")) > 1  # under accelerate launch: gloo
    accelerator = Accelerator(cpu=DEVICE == "cpu" or two, log_with="tensorboard", project_dir=out)
    accelerator.init_trackers("run")
    model = torch.nn.Linear(32, 32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32)),
                                       batch_size=8)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    watch(accelerator, model, optimizer, report_every=2)
    for step, (x,) in enumerate(data):
        if step == STEPS:
            break
        plant(accelerator.device)
        loss = model(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.end_training()


if __name__ == "__main__":
    kind, where = sys.argv[1], sys.argv[2]
    os.makedirs(where, exist_ok=True)
    if kind == "lightning":
        lightning(where)
    elif kind == "lightning-ddp":
        lightning(where, ddp=True)
    elif kind == "pytorch-lightning":
        lightning(where, package="pytorch_lightning")
    elif kind == "trainer":
        trainer(where)
    elif kind == "accelerate":
        accelerate(where)
    else:
        sys.exit(f"unknown run {kind!r}")
