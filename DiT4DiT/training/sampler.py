"""Batches of dataset indices whose order depends only on (seed, epoch), so a resumed run sees the same data."""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterator
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

from DiT4DiT.config.errors import ConfigError
from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.training.preemption import ignore_stop_signals


class ResumableBatchOrder:
    """Which dataset indices form each of this rank's batches (not a torch Sampler: `iterate_batches` hands
    `epoch_batches(epoch)` to a DataLoader as its batch_sampler). Shuffles the index space per epoch and gives
    each rank its own shard of every global batch.

    The position in the data follows from the number of micro-batches already consumed, so resuming needs
    nothing but that count: `iterate_batches(..., start_micro_step, ...)` skips to it without loading any sample.
    """

    def __init__(self, dataset_len: int, batch_size: int, rank: int, world_size: int, seed: int):
        if dataset_len < batch_size * world_size:
            raise ConfigError(
                f"the dataset has {dataset_len} samples, fewer than one global batch "
                f"({batch_size} per process x {world_size} processes); lower datasets.vla_data.per_device_batch_size"
            )
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        # Incomplete trailing global batches are dropped so every rank takes the same number of steps.
        self.batches_per_epoch = dataset_len // (batch_size * world_size)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        order = torch.randperm(self.dataset_len, generator=generator).tolist()
        global_batch = self.batch_size * self.world_size
        batches = []
        for b in range(self.batches_per_epoch):
            chunk = order[b * global_batch : (b + 1) * global_batch]
            batches.append(chunk[self.rank * self.batch_size : (self.rank + 1) * self.batch_size])
        return batches

    def position(self, micro_step: int) -> tuple[int, int]:
        """(epoch, batch index within the epoch) of the given micro-step."""
        return divmod(micro_step, self.batches_per_epoch)


class WorkerFailure(NamedTuple):
    """What a data worker hands back in place of a batch when reading a sample raised one of our errors."""

    error: DiT4DiTError


class _ErrorsAsItems(Dataset):
    """The dataset as a worker reads it: our error becomes an item, so the main process gets the error itself
    (its one-line message and exit code), not torch's re-raised copy with the worker's traceback in its message."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        try:
            return self.dataset[index]
        except DiT4DiTError as error:
            return WorkerFailure(error)


def _collate_unless_failed(collate_fn: Callable, items: list):
    failure = next((item for item in items if isinstance(item, WorkerFailure)), None)
    return failure if failure is not None else collate_fn(items)


def _end_workers(batches) -> None:
    """End the loader's worker processes now, while the interpreter runs: torch's own clean-up does nothing once
    it exits, and multiprocessing's exit-time join would then wait forever for workers that ignore SIGTERM (so a
    preempted step can finish). torch asks them to stop (and waits up to 5 s each); any still running (a long
    decode) is killed: they hold nothing worth saving."""
    shutdown = getattr(batches, "_shutdown_workers", None)  # torch's multi-process iterator (none with 0 workers)
    if shutdown is None:
        return
    shutdown()
    for worker in batches._workers:
        if worker.is_alive():
            worker.kill()
            worker.join()


def _epoch(loader: DataLoader) -> Iterator[list]:
    batches = iter(loader)
    try:
        for batch in batches:
            if isinstance(batch, WorkerFailure):
                raise batch.error
            yield batch
    finally:  # an error, the end of the run, or the stream closed: the workers end with it
        _end_workers(batches)


def iterate_batches(
    dataset: Dataset, order: ResumableBatchOrder, start_micro_step: int, num_workers: int, collate_fn: Callable
) -> Generator[list, None, None]:
    """Endless stream of this rank's micro-batches, starting at `start_micro_step`. A DiT4DiTError raised while
    reading a sample (in a worker or not) is raised here as it was, with the workers ended."""
    epoch, skip = order.position(start_micro_step)
    while True:
        dataset.set_epoch(epoch)  # before the workers fork, so they see it
        loader = DataLoader(
            _ErrorsAsItems(dataset),
            batch_sampler=order.epoch_batches(epoch)[skip:],
            num_workers=num_workers,
            collate_fn=functools.partial(_collate_unless_failed, collate_fn),
            # Its own generator: otherwise each new iterator draws a worker seed from the global RNG, and a
            # resumed run (one extra iterator) would drift from the uninterrupted one.
            generator=torch.Generator().manual_seed(order.seed + epoch),
            worker_init_fn=ignore_stop_signals,
        )
        yield from _epoch(loader)
        epoch, skip = epoch + 1, 0
