"""Write a checkpoint with every weight, for tools that load strictly (the original's from_pretrained, servers).

Our checkpoints leave out the frozen text encoder and VAE (they reload from framework.cosmos25.base_model, and
save ~16 GB per checkpoint at 2B size). This rebuilds the run's model from `<run_dir>/config.yaml`, loads the
checkpoint (frozen parts from base_model) and saves the full state dict, a flat {name: tensor} file as the
original writes. Put it in a run folder (as checkpoints/steps_N_pytorch_model.pt or final_model/pytorch_model.pt
beside its config.yaml and dataset_statistics.json) for the original to load.

    python -m DiT4DiT.tools.export_checkpoint runs/my_run/final_model/pytorch_model.pt --out exported/full.pt

A run trained with `--trainer.save_full_state_dict true` needs no export: its checkpoints hold every weight.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # before the imports below: a missing package is one line, not a traceback
    from DiT4DiT.requirements_check import TRAINING, require
    require("python -m DiT4DiT.tools.export_checkpoint", TRAINING)

import torch

from DiT4DiT.errors import run_main
from DiT4DiT.model.framework.base_framework import baseframework
from DiT4DiT.host.output_paths import OutputError, check_out
from DiT4DiT.training.checkpoint import atomic_write


def export_full_checkpoint(checkpoint: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Save every weight of the model `checkpoint` belongs to into `out` (atomically); returns `out`."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise OutputError(f"{out} already exists; pass --overwrite to replace it")
    if out.resolve() == Path(checkpoint).resolve():
        raise OutputError(f"--out {out} is the checkpoint being read; write the full file elsewhere")
    check_out(out, owned=Path(checkpoint).resolve().parents[1])  # its own run folder, as the trainer suggests
    model = baseframework.from_pretrained(checkpoint)
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in model.state_dict().items()}
    atomic_write(out, lambda tmp: torch.save(state, tmp))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a .pt inside a run folder (two levels below config.yaml)")
    parser.add_argument("--out", type=Path, required=True, help="where the full checkpoint goes")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args = parser.parse_args(argv)
    return run_main(lambda: print(export_full_checkpoint(args.checkpoint, args.out, args.overwrite)),
                    "export_checkpoint")


if __name__ == "__main__":
    sys.exit(main())
