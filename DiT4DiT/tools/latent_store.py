"""Fill a run's VAE latent store before training: every clip its samples can draw, encoded once by the frozen VAE.

    python -m DiT4DiT.tools.latent_store --config_yaml CONFIG [--a.b.c value ...]
    accelerate launch --num_processes 16 -m DiT4DiT.tools.latent_store --config_yaml CONFIG ...   # split over a node

The same config (and overrides) as the training run: the store it fills is the one training with
`framework.cosmos25.latent_cache true` reads (same key: the VAE's weights, the sample layout, the dtype). Training
fills whatever is missing before step 1 anyway; this does it ahead, with the VAE alone (no transformer, no text
encoder), where a long fill cannot hold the training job's devices or collective timeouts. Episodes already stored
are skipped, so it resumes where it stopped. Prints one JSON line: episodes, clips, encoded now, bytes, seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta

if __name__ == "__main__":  # before the imports below: a missing package is one line, not a traceback
    from DiT4DiT.requirements_check import TRAINING, require
    require("python -m DiT4DiT.tools.latent_store", TRAINING)

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.config.schema import load_config, normalize_cli_overrides
from DiT4DiT.config.validate import has_action_head, latent_cache_refusal
from DiT4DiT.errors import run_main
from DiT4DiT.logging_setup import configure_logging


def fill(argv: list[str]) -> dict | None:
    """Fill the store of the config in `argv`; the report on the main process (None on the others)."""
    from accelerate import Accelerator

    from DiT4DiT.dataloader import build_vla_datasets
    from DiT4DiT.dataloader.config_checks import check_latent_cache
    from DiT4DiT.model.modules.clip_encoding import load_vae
    from DiT4DiT.model.modules.cosmos_pipeline import TORCH_DTYPES
    from DiT4DiT.model.modules.latent_store import fill_latent_store
    from DiT4DiT.model.modules.node_store import Ranks
    from DiT4DiT.base_model.pipeline_shape import read_pipeline_shape
    from DiT4DiT.training.host_waits import HostWaits

    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.tools.latent_store", description=__doc__.splitlines()[0])
    parser.add_argument("--config_yaml", required=True, help="the training run's config")
    args, overrides = parser.parse_known_args(argv)
    cfg = load_config(args.config_yaml, normalize_cli_overrides(overrides))
    refusal = latent_cache_refusal(cfg)
    if refusal is not None:
        raise ConfigError(refusal)
    cosmos, data = cfg.framework.cosmos25, cfg.datasets.vla_data
    base_model = cosmos.base_model_folder  # unset: a ConfigError now, not after the datasets are indexed
    check_latent_cache(data)
    accelerator = Accelerator()
    # Encoding a share may take longer than a device collective waits: the ranks wait for each other on the host.
    waits = HostWaits(timedelta(seconds=cfg.trainer.one_rank_timeout_s))
    started = time.perf_counter()
    with waits.first(accelerator.is_local_main_process):  # one process per node indexes, the others read its cache
        datasets = build_vla_datasets(data, cfg.framework.action_model.chunk_length, cfg.seed,
                                      ("train", "eval") if has_action_head(cfg) else ("train",))
    vae = load_vae(base_model, TORCH_DTYPES[cosmos.torch_dtype], cosmos.local_files_only)
    vae.requires_grad_(False).to(accelerator.device)
    _, report = fill_latent_store(
        vae, [e for dataset in datasets.values() for e in dataset.latent_episodes()],
        store_dir=cfg.store_dir("latent"), base_model=base_model,
        layout=datasets["train"].sample_layout(),
        num_frames_out=data.num_frames,
        temporal_factor=read_pipeline_shape(base_model).temporal_factor,
        with_future=cosmos.training != "action", ranks=Ranks.from_accelerator(accelerator, waits.all_sum),
        batch_size=data.per_device_batch_size, mixed_precision=cfg.trainer.mixed_precision)
    if not accelerator.is_main_process:
        return None
    return {"episodes": report.episodes, "clips": report.rows, "encoded_now": report.encoded,
            "store_bytes": report.store_bytes, "folder": str(report.folder),
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    from DiT4DiT.training.process_group import destroy_process_group

    configure_logging()  # the fill's progress: each rank's first episode and its pace, then the store's size

    def body() -> None:
        result = fill(sys.argv[1:] if argv is None else argv)
        if result is not None:
            print(json.dumps(result))

    status = None
    try:
        status = run_main(body, "latent_store")
        return status
    finally:
        destroy_process_group(everyone_here=status == 0)


if __name__ == "__main__":
    sys.exit(main())
