"""The modules of DiT4DiT/ whose functions run on the walk of docs/training.md, measured: a profiler hook
(sys.setprofile, Python function calls; module bodies run by imports are left out) records each file the first
time one of its functions is called.

    python scripts/walk_files.py launch BASE_MODEL DATA_ROOT RUN_ROOT   # the launcher planning a run (prepare())
    python scripts/walk_files.py train BASE_MODEL DATA_ROOT RUN_ROOT    # the trainer, main() to the first optimizer.step()
    python scripts/walk_files.py step BASE_MODEL DATA_ROOT RUN_ROOT     # trainer.steps() to the first optimizer.step()

One process, the tiny config, one training step on the CPU; one file a line, in the order first entered.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "DiT4DiT")
TINY_CONFIG = "DiT4DiT/config/tiny/dit4dit_tiny.yaml"


class Entered:
    """Files of DiT4DiT/ whose functions are called while `recording`, in the order first entered."""

    def __init__(self, recording: bool):
        self.files: dict[str, None] = {}
        self.recording = recording

    def __call__(self, frame, event, arg) -> None:
        code = frame.f_code
        if event != "call" or code.co_name == "<module>":
            return
        if code.co_name == "steps" and code.co_filename.endswith("training/trainer.py"):
            self.recording = True  # the step phase starts at the Trainer's first batch
        if self.recording and code.co_filename.startswith(PACKAGE):
            self.files.setdefault(str(Path(code.co_filename).relative_to(ROOT)))

    def start(self) -> None:
        sys.setprofile(self)
        threading.setprofile(self)

    def stop(self) -> None:
        self.recording = False
        sys.setprofile(None)
        threading.setprofile(None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("launch", "train", "step"))
    parser.add_argument("base_model")
    parser.add_argument("data_root")
    parser.add_argument("run_root", help="an empty folder for the run (and the launcher's plan)")
    args = parser.parse_args()
    common = [f"--base_model={args.base_model}", f"--data_root_dir={args.data_root}", f"--run_root_dir={args.run_root}",
              "--run_id=walk", "--max_train_steps=1"]
    entered = Entered(recording=args.phase != "step")
    if args.phase == "launch":
        from DiT4DiT.launch.run import prepare

        entered.start()
        prepare(common)
        entered.stop()
    else:
        import torch

        from DiT4DiT.training.train import main as train

        step = torch.optim.AdamW.step

        def stop_at_the_first_step(optimizer, *rest, **options):
            entered.stop()
            return step(optimizer, *rest, **options)

        torch.optim.AdamW.step = stop_at_the_first_step
        entered.start()
        status = train(["--config_yaml", TINY_CONFIG, f"--framework.cosmos25.base_model={args.base_model}",
                        f"--datasets.vla_data.data_root_dir={args.data_root}", f"--run_root_dir={args.run_root}",
                        "--run_id=walk", "--trackers=[jsonl]", f"--datasets.vla_data.cache_dir={Path(args.run_root) / 'cache'}",
                        "--datasets.vla_data.num_workers=0", "--trainer.max_train_steps=1"])
        entered.stop()
        if status:
            return status
    print("\n".join(entered.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
