"""Data pipeline: GR00T-flavoured LeRobot v2.x datasets → mixture samples in the original's example-dict format."""

from DiT4DiT.dataloader.build import build_vla_dataset, build_vla_datasets
from DiT4DiT.dataloader.dataset import MixtureDataset, collate_fn
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.statistics import save_dataset_statistics
from DiT4DiT.dataloader.transforms import Normalizer

__all__ = ["DataError", "MixtureDataset", "Normalizer", "build_vla_dataset", "build_vla_datasets", "collate_fn", "save_dataset_statistics"]
