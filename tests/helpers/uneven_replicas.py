"""Run the trainer (under accelerate launch) with rank 1 made to disagree, as a real device could:

    python tests/helpers/uneven_replicas.py --config_yaml ... [overrides]

On rank 1 every float64 sum comes out one part in 1e12 off, as the non-deterministic device sums of Ascend
A2/A3 do (a device-side checksum would see different weights), and, just before the final model is written,
one trainable tensor really is changed (`UNEVEN_REPLICAS_TENSOR` names it in the test's output).
"""

import os
import sys

import torch

from DiT4DiT.training import train, trainer

if os.environ.get("RANK") == "1":
    exact_sum = torch.Tensor.sum

    def noisy_sum(self, *args, **kwargs):
        total = exact_sum(self, *args, **kwargs)
        return total * (1 + 1e-12) if total.dtype == torch.float64 else total

    torch.Tensor.sum = noisy_sum
    save_final_model = trainer.Trainer.save_final_model

    def change_one_tensor_then_save(self):
        name, parameter = next((n, p) for n, p in self.unwrapped.named_parameters() if p.requires_grad)
        with torch.no_grad():
            parameter.view(-1)[0] += 1.0
        print(f"UNEVEN_REPLICAS_TENSOR {name}", flush=True)
        save_final_model(self)

    trainer.Trainer.save_final_model = change_one_tensor_then_save
sys.exit(train.main(sys.argv[1:]))
