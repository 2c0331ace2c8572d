"""A trained DiT4DiT run as a policy: request checks, prediction, and actions in the robot's units.

Beyond the original's request an example may carry: "seed" (its own noise), "state_units": "robot" (a raw state
the server encodes as training did), and "prev_actions" with "inference_delay" (and optionally
"execution_horizon"): real-time chunking, the new chunk continuing the previous one (model/modules/action_model/
rtc.py). An example without them is answered as before, bit for bit.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from DiT4DiT.config.schema import MAX_SEQUENCE_LENGTH
from DiT4DiT.config.sections import DatasetsVlaDataSection, FrameworkSection
from DiT4DiT.dataloader.dataset import combine_views
from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.transforms import Normalizer, StateEncoder
from DiT4DiT.errors import DiT4DiTError
from DiT4DiT.memory.estimate import mixture_views
from DiT4DiT.model.framework.share_tools import check_unnorm_key
from DiT4DiT.model.modules.action_model.rtc import MAX_GUIDANCE_WEIGHT, PREFIX_KEYS
from DiT4DiT.serving.layout import run_layout
from DiT4DiT.serving.run_folder_checks import RunFolderFileError, read_run_config_file
from DiT4DiT.serving.stage_timing import StageClock

log = logging.getLogger(__name__)


class RequestError(ValueError):
    """A request the policy cannot answer; the message says what to change."""


# The prompt is cut at max_sequence_length tokens; English runs about 4 characters a token, so an instruction
# longer than this many characters per token would mostly be thrown away (and tokenising a huge one costs GBs).
CHARS_PER_TOKEN = 4
# A per-example noise seed (an example's "seed"): what torch.Generator.manual_seed takes.
SEED_RANGE = (0, 2**63 - 1)
# Views side by side when the run's mixture does not say how many cameras it has (a mixture file, say).
MAX_VIEWS_UNKNOWN = 8
FLOAT_BYTES = 4
STATE_UNITS = ("normalized", "robot")  # an example's "state_units": as the original's clients send it, or raw
MAX_SAMPLING_STEPS = 1000  # the server's --sampling_steps bound: the head quantises time into 1000 buckets


def camera_count(data_mix: str, data_config: str) -> int:
    """The run's cameras as the doctor and the trainer count them (memory/estimate.py: mixture_views);
    MAX_VIEWS_UNKNOWN where this host cannot tell (a dataset path that is not here, a data config the original
    names but never defines)."""
    try:
        return mixture_views(data_mix, data_config)
    except (DiT4DiTError, KeyError):
        return MAX_VIEWS_UNKNOWN


@dataclass(frozen=True)
class PolicyShape:
    """What a request must look like for one trained model, and the bounds that cap one request's work."""

    image_size: int  # each camera view is image_size x image_size
    state_dim: int  # 0: the model takes no state
    chunk: int  # action steps per prediction
    action_dim: int  # model output width (padded); the robot's width is the statistics'
    max_batch: int
    max_views: int  # cameras of the run's data configs
    max_frames: int  # frames per example the run trained on (only the first conditions the action)
    max_instruction_chars: int
    views: str = "side_by_side"  # the run's camera layout (datasets.vla_data.views): side_by_side | as_frames
    # Real-time chunking: the largest inference_delay a request may ask for. Heads trained with
    # framework.action_model.rtc_training take exact prefixes up to its max_delay; others are guided, up to chunk-1.
    exact_prefix: bool = False
    max_delay: int = 0

    @classmethod
    def of(cls, framework: FrameworkSection, data: DatasetsVlaDataSection, max_batch: int,
           views: str = "side_by_side") -> "PolicyShape":
        head = framework.action_model
        frames = data.num_frames
        exact = head.rtc_training.enabled
        return cls(data.image_size, head.state_dim, head.chunk_length, head.action_dim, max_batch,
                   camera_count(data.data_mix, data.data_config), frames,
                   CHARS_PER_TOKEN * framework.cosmos25.max_sequence_length, views, exact,
                   head.rtc_training.max_delay if exact else head.chunk_length - 1)

    def frame_shape(self) -> str:
        """An `image` frame's shape for this layout, as the errors name it."""
        size = self.image_size
        return f"({size}, {size}, 3), one camera" if self.views == "as_frames" else f"({size}, {size} x views, 3)"

    def max_image_frames(self) -> int:
        """Frames an `image` list may hold: as_frames puts every camera's frames after the previous one's."""
        return self.max_frames * (self.max_views if self.views == "as_frames" else 1)

    def max_view_pixels(self) -> int:
        """The largest camera image `views` may carry (resized here): max_views uint8 views of it take the bytes
        of max_frames float32 frames, so they fit the message bound (224 pixels, 5 frames: 1,003,520 pixels)."""
        return self.max_frames * self.image_size * self.image_size * FLOAT_BYTES

    def max_message_bytes(self) -> int:
        """The largest well-formed request: max_batch examples of max_frames float32 frames of max_views views,
        instructions at their bound (4 bytes a character at most in UTF-8), states; plus 1 MiB of framing."""
        frame = self.image_size * self.image_size * self.max_views * 3 * FLOAT_BYTES
        example = (self.max_frames * frame + FLOAT_BYTES * self.max_instruction_chars
                   + FLOAT_BYTES * 8 * self.state_dim + 8 * self.chunk * self.action_dim)  # prev_actions, float64
        return self.max_batch * example + (1 << 20)


def read_statistics(path: Path) -> dict:
    """dataset_statistics.json as {tag: {"action": {...}, "state": {...}}}; RunFolderFileError naming the file
    otherwise."""
    try:
        statistics = json.loads(path.read_text())
    except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, or nested beyond the parser
        raise RunFolderFileError(f"{path}: not readable JSON ({type(error).__name__}: {str(error)[:200]}); restore the "
                                 "run's dataset_statistics.json (the trainer writes it at step 0)") from None
    shapes = isinstance(statistics, dict) and statistics and all(
        isinstance(entry, dict) and isinstance(entry.get("action"), dict) and isinstance(entry.get("state"), dict)
        for entry in statistics.values())
    if not shapes:
        raise RunFolderFileError(f"{path}: expected a map of statistics tags, each with 'action' and 'state' sections; "
                                 f"got {type(statistics).__name__}; restore the run's dataset_statistics.json")
    return statistics


def check_sequence_length(recorded: dict, config_path: Path) -> None:
    """Range check of the prompt length a request is encoded at, before the model is built: a huge one makes every
    request take GBs. `recorded`: config.yaml as read (its values are typed later, when the config loads)."""
    length: object = recorded
    for key in ("framework", "cosmos25", "max_sequence_length"):
        length = length.get(key) if isinstance(length, dict) else None
    if not isinstance(length, (int, float, str)):
        return  # absent (the default) or not a number: the config's typing names it
    try:
        value = float(length)  # YAML reads 1e8 as text, which the config's typing then takes as a number
    except (TypeError, ValueError):
        return  # absent (the default) or not a number: the config's typing names it
    if not 1 <= value <= MAX_SEQUENCE_LENGTH:
        raise RunFolderFileError(f"{config_path}: framework.cosmos25.max_sequence_length={length} is out of range 1.."
                                 f"{MAX_SEQUENCE_LENGTH} (tokens per prompt; the Cosmos pipeline uses 512, and each "
                                 "request's prompt tensors grow with it); set it to the value the run trained with")


def check_finite_weights(model: torch.nn.Module, ckpt) -> None:
    """A model with NaN or infinite weights would answer every request with NaN actions: refuse it at load."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise RunFolderFileError(f"{ckpt}: weight {name} holds NaN or infinite values (training diverged or the "
                                     "file is damaged); serve an earlier checkpoint")


class ActionUnnormalizer:
    """Normalised model actions -> the robot's units, with the run's action statistics (ours or the original's).

    Ranged dims (min_max, q99) are clipped to [-1, 1] first, as the original's clients do, so actions stay in the
    recorded range. Gripper dims are 0/1: binary ones by their mode, and grippers trained raw (LIBERO's, the dims
    the statistics' `mask` leaves out with no mode of their own) at 0.5 after clipping, as the original's LIBERO
    client binarises them.
    """

    def __init__(self, section: dict):
        self.normalizer = Normalizer.from_statistics(section)
        self.width = len(self.normalizer.modes)
        modes = self.normalizer.modes
        self._ranged = np.isin(modes, ("min_max", "q99"))
        kept = np.asarray(section.get("mask", np.ones(self.width, dtype=bool)), dtype=bool)
        self._raw_gripper = (modes == "identity") & ~kept

    def __call__(self, normalized: np.ndarray) -> np.ndarray:
        y = np.asarray(normalized, dtype=np.float64)[..., : self.width]
        y = np.where(self._ranged | self._raw_gripper, np.clip(y, -1.0, 1.0), y)
        actions = self.normalizer.unnormalize(y)
        actions = np.where(self._raw_gripper, (y >= 0.5).astype(np.float64), actions)
        return actions.astype(np.float32)


def _frames(value, where: str, max_frames: int) -> list[np.ndarray]:
    frames = list(value) if isinstance(value, (list, tuple)) else [value]
    if not frames:
        raise RequestError(f"{where}.image is an empty list; send at least the current frame")
    if len(frames) > max_frames:
        raise RequestError(f"{where}.image holds {len(frames)} frames; this model takes at most {max_frames} (only the "
                           "first, the current observation, conditions the action): send camera views as 'views'")
    for position, frame in enumerate(frames):
        if not isinstance(frame, np.ndarray):
            raise RequestError(f"{where}.image[{position}] is a {type(frame).__name__}, not a numpy array (H, W, 3)")
        if frame.dtype != np.uint8 and frame.dtype.kind != "f":
            raise RequestError(f"{where}.image[{position}] has dtype {frame.dtype}; send uint8 (0-255) or float (0-1)")
        if frame.dtype.kind == "f" and not np.isfinite(frame).all():
            raise RequestError(f"{where}.image[{position}] holds NaN or infinite values; send uint8 (0-255) or finite "
                               "float (0-1) pixels")
        # The model would read a float frame whose maximum is above 1 as 0-255 (1.0001 becomes a black image).
        if frame.dtype.kind == "f" and frame.size and not 0.0 <= frame.min() <= frame.max() <= 1.0:
            raise RequestError(f"{where}.image[{position}] holds float pixels from {frame.min():g} to {frame.max():g}; "
                               "float pixels lie in 0..1 (send 0-255 images as uint8)")
    return frames


class Policy:
    """One loaded model answering checked requests; `infer` is not thread-safe (the server's one model thread
    runs it). `profile`: every answer carries its stages' milliseconds (stage_timing.py) as `stage_ms`."""

    def __init__(self, model, shape: PolicyShape, statistics_tag: str, statistics: dict, profile: bool = False):
        self.model = model
        self.shape = shape
        self.statistics_tag = statistics_tag
        self.statistics = statistics
        self.unnormalize = ActionUnnormalizer(statistics["action"])
        self.encode_state, self._robot_state_problem = None, "this model takes no state"
        if shape.state_dim:
            try:
                self.encode_state = StateEncoder(statistics["state"], shape.state_dim)
            except (DataError, KeyError) as error:  # the original's statistics name no modes
                self._robot_state_problem = f"the run's state statistics cannot encode a raw state ({error})"
        self.clock = StageClock(model, model.backbone_interface.device) if profile else None

    @property
    def sampling_steps(self) -> int:
        return self.model.action_model.num_inference_timesteps

    @classmethod
    def load(cls, ckpt: str | Path, device: torch.device, *, bf16: bool = False, unnorm_key: str | None = None,
             max_batch: int = 64, base_model: str | None = None, sampling_steps: int | None = None,
             profile: bool = False) -> "Policy":
        """`base_model`: the local Cosmos snapshot, for a run folder whose recorded one does not exist here.
        `sampling_steps`: the head's Euler steps in place of framework.action_model.num_inference_timesteps."""
        from DiT4DiT.model.framework.base_framework import baseframework

        if not Path(ckpt).is_file():
            raise RunFolderFileError(f"{ckpt}: no such checkpoint file")
        stats_path = Path(ckpt).parent.parent / "dataset_statistics.json"
        if not stats_path.is_file():
            raise RunFolderFileError(f"{stats_path}: missing; the policy needs the run's statistics to return "
                                     "actions in the robot's units (the trainer writes it into the run dir)")
        statistics = read_statistics(stats_path)
        tag = check_unnorm_key(statistics, unnorm_key, str(stats_path))
        entry = statistics[tag]
        config_path = Path(ckpt).parents[1] / "config.yaml"
        if config_path.is_file():  # a missing one is named by the loader
            check_sequence_length(read_run_config_file(config_path), config_path)
        # Original run folders too (keys they lack come from the weights).
        model = baseframework.from_pretrained(ckpt, base_model=base_model)
        if model.action_model is None:
            raise RunFolderFileError(f"{ckpt}: framework.cosmos25.training=video has no action head to serve")
        check_finite_weights(model, ckpt)
        # Frozen throughout: no gradients when serving. Instructions the run's prompt store holds are read from it;
        # others are encoded by the text encoder.
        model.requires_grad_(False)
        if bf16:
            model = model.to(torch.bfloat16)
        model = model.to(device).eval()
        data = model.config.datasets.vla_data
        layout = run_layout(data, entry, str(stats_path))
        log.info("camera layout %s (%s): requests may send an example's cameras one by one as 'views', or 'image' "
                 "frames of that layout", layout.views, layout.source)
        shape = PolicyShape.of(model.config.framework, data, max_batch, layout.views)
        if sampling_steps is not None:
            log.info("action sampling with %d Euler steps (the run trained with num_inference_timesteps=%d)",
                     sampling_steps, model.action_model.num_inference_timesteps)
            model.action_model.num_inference_timesteps = sampling_steps
        return cls(model, shape, tag, entry, profile)

    def metadata(self) -> dict:
        """Sent on connect. `env` as the original's server; the rest lets a client build requests without the run dir."""
        return {
            "env": "simpler_env",
            "image_size": self.shape.image_size,
            "views": self.shape.views,
            "state_dim": self.shape.state_dim,
            "action_chunk": self.shape.chunk,
            "action_dim": self.unnormalize.width,
            "unnorm_key": self.statistics_tag,
            "statistics": {"action": self.statistics["action"], "state": self.statistics["state"]},
            "state_units": list(STATE_UNITS if self.encode_state is not None else STATE_UNITS[:1]),
            "sampling_steps": self.sampling_steps,
            # Real-time chunking: exact prefixes (a head trained with rtc_training) or P1's guidance.
            "rtc": {"prefix": "exact" if self.shape.exact_prefix else "guided", "max_delay": self.shape.max_delay,
                    "max_guidance_weight": None if self.shape.exact_prefix else MAX_GUIDANCE_WEIGHT},
            "limits": {"max_batch": self.shape.max_batch, "max_views": self.shape.max_views,
                       "max_frames": self.shape.max_frames, "max_instruction_chars": self.shape.max_instruction_chars,
                       "max_view_pixels": self.shape.max_view_pixels()},
        }

    def check(self, message) -> list[dict]:
        """The request's examples, made into what the model takes; RequestError names what is wrong."""
        if not isinstance(message, dict):
            raise RequestError(f"a request is a map with 'examples'; got {type(message).__name__}")
        examples = message.get("examples")
        if isinstance(examples, dict):
            examples = [examples]
        if not isinstance(examples, list) or not examples:
            raise RequestError("the request needs 'examples': a non-empty list of {image, lang, state} maps")
        if len(examples) > self.shape.max_batch:
            raise RequestError(f"{len(examples)} examples in one request; this server takes at most "
                               f"{self.shape.max_batch} (--max_batch)")
        if len({"views" in ex for ex in examples if isinstance(ex, dict)}) > 1:
            raise RequestError("some examples carry 'views' and some 'image'; use one form in all examples of a request")
        checked = [self._check_example(example, f"examples[{i}]") for i, example in enumerate(examples)]
        if len({tuple(ex["image"][0].shape) for ex in checked}) > 1:
            raise RequestError("the examples' images differ in shape; every example of one request needs the same views")
        if len({"state" in ex for ex in checked}) > 1:
            raise RequestError("some examples carry 'state' and some do not; send it in all or none")
        return checked

    def _check_example(self, example, where: str) -> dict:
        if not isinstance(example, dict):
            raise RequestError(f"{where} is a {type(example).__name__}; each example is a map with image, lang, state")
        if ("image" in example) == ("views" in example):
            raise RequestError(f"{where} {'has both' if 'image' in example else 'lacks'} 'image' and 'views'; send one: "
                               f"views = [uint8 (H, W, 3) per camera] or image = [frames {self.shape.frame_shape()}]")
        if "lang" not in example:
            raise RequestError(f"{where} lacks 'lang'; each example needs image or views, lang (str), state")
        lang = example["lang"]
        if not isinstance(lang, str) or not lang.strip():
            raise RequestError(f"{where}.lang must be a non-empty instruction string")
        if len(lang) > self.shape.max_instruction_chars:
            raise RequestError(f"{where}.lang is {len(lang)} characters; this model reads at most "
                               f"{self.shape.max_instruction_chars} (framework.cosmos25.max_sequence_length tokens)")
        if "views" in example:
            current = self._combined_views(example["views"], where)
        else:
            current = self._current_frame(example["image"], where)
        out: dict[str, object] = {"image": [current], "lang": lang}
        units = example.get("state_units", STATE_UNITS[0])
        if units not in STATE_UNITS:
            raise RequestError(f"{where}.state_units is {units!r}; send 'normalized' (normalised as in training and "
                               "zero-padded, the default) or 'robot' (the raw state, encoded here)")
        if "state" in example:
            out["state"] = (self._robot_state(example["state"], where) if units == "robot"
                            else self._check_state(example["state"], where))
        if "seed" in example:
            out["seed"] = _check_seed(example["seed"], where)
        if any(name in example for name in PREFIX_KEYS):
            out.update(self._check_prefix(example, where))
        return out

    def _robot_state(self, state, where: str) -> np.ndarray:
        """A raw state encoded with the run's statistics exactly as training encoded it (StateEncoder)."""
        if self.encode_state is None:
            raise RequestError(f"{where}.state_units 'robot': {self._robot_state_problem}; send the state normalised")
        if not isinstance(state, np.ndarray) or state.dtype.kind not in "fiu" or state.ndim > 2:
            raise RequestError(f"{where}.state must be a numeric numpy array of the robot's {self.encode_state.width} "
                               "raw state values (state_units 'robot')")
        if not np.isfinite(state).all():
            raise RequestError(f"{where}.state holds NaN or infinite values")
        try:
            return self.encode_state(state)
        except DataError as error:
            raise RequestError(f"{where}.state: {error}") from None

    def _check_prefix(self, example, where: str) -> dict:
        """Real-time chunking's keys: prev_actions, the previous reply's normalized_actions rows not yet executed
        when this observation was taken (n, action_dim); inference_delay d, how many of them execute before this
        reply arrives; execution_horizon, where the guided overlap ends (d..n, default n)."""
        missing = [name for name in PREFIX_KEYS[:2] if name not in example]
        if missing:
            raise RequestError(f"{where} lacks {' and '.join(missing)}: real-time chunking needs prev_actions (the "
                               "previous reply's normalized_actions rows not yet executed at this observation, (n, "
                               f"{self.shape.action_dim})) and inference_delay (how many of them execute before this "
                               "reply arrives)")
        previous, chunk, width = example["prev_actions"], self.shape.chunk, self.shape.action_dim
        if not isinstance(previous, np.ndarray) or previous.dtype.kind != "f" or previous.ndim != 2 \
                or not 1 <= previous.shape[0] <= chunk or previous.shape[1] != width:
            what = f"a {previous.dtype} array of shape {previous.shape}" if isinstance(previous, np.ndarray) \
                else f"a {type(previous).__name__}"
            raise RequestError(f"{where}.prev_actions is {what}; send float rows of the previous reply's "
                               f"normalized_actions, (n, {width}) with n from 1 to the chunk's {chunk}")
        if not np.isfinite(previous).all():
            raise RequestError(f"{where}.prev_actions holds NaN or infinite values")
        count = previous.shape[0]
        most = min(count, self.shape.max_delay)
        why = ("framework.action_model.rtc_training.max_delay, the most this model trained with" if
               self.shape.exact_prefix else "the chunk less one")
        delay = _check_count(example["inference_delay"], f"{where}.inference_delay", 0, most,
                             f"at most the {count} prev_actions rows and {self.shape.max_delay} ({why})")
        horizon = _check_count(example.get("execution_horizon", count), f"{where}.execution_horizon", delay, count,
                               "from inference_delay to the prev_actions rows: where the guided overlap ends")
        return {"prev_actions": np.array(previous, dtype=np.float32), "inference_delay": delay,
                "execution_horizon": horizon}

    def _current_frame(self, image, where: str) -> np.ndarray:
        """The first of an example's `image` frames, each checked against the run's layout."""
        frames = _frames(image, where, self.shape.max_image_frames())
        size, most = self.shape.image_size, self.shape.max_views
        wide = 1 if self.shape.views == "as_frames" else most
        for position, frame in enumerate(frames):
            if frame.ndim != 3 or frame.shape[-1] != 3 or frame.shape[0] != size or frame.shape[1] % size \
                    or not 0 < frame.shape[1] // size <= wide:
                how = ("one frame per camera, each camera's after the previous one's" if self.shape.views == "as_frames"
                       else f"with 1 to {most} views side by side")
                raise RequestError(
                    f"{where}.image[{position}] has shape {frame.shape}; this run combines cameras {self.shape.views}, "
                    f"so a frame is {self.shape.frame_shape()} ({how}): resize each camera view to {size}x{size}, or "
                    "send the views one by one as 'views' and the server combines them as training did")
        # Only the current frame conditions the action. A copy in native byte order: arrays off the wire are
        # read-only views of the message (torch refuses to wrap them silently) and may be big-endian.
        return np.array(frames[0], dtype=frames[0].dtype.newbyteorder("="))

    def _combined_views(self, views, where: str) -> torch.Tensor:
        """The current frame made from one image per camera by training's own combine_views for the run's layout
        (each view resized to image_size, bilinear): side_by_side gives one wide frame, as_frames one frame per
        camera, of which the first conditions the action as frame 0 does in training."""
        views = list(views) if isinstance(views, (list, tuple)) else [views]
        most = self.shape.max_views
        if not 0 < len(views) <= most:
            raise RequestError(f"{where}.views holds {len(views)} images; this model takes 1 to {most} cameras, "
                               "one uint8 (H, W, 3) image each, in the data config's camera order")
        for position, view in enumerate(views):
            if not isinstance(view, np.ndarray) or view.dtype != np.uint8 or view.ndim != 3 or view.shape[-1] != 3 \
                    or not 0 < view.shape[0] * view.shape[1] <= self.shape.max_view_pixels():
                what = f"a {view.dtype} array of shape {view.shape}" if isinstance(view, np.ndarray) \
                    else f"a {type(view).__name__}"
                raise RequestError(f"{where}.views[{position}] is {what}; each view is one camera's uint8 (H, W, 3) "
                                   f"image of at most {self.shape.max_view_pixels()} pixels (resized to {self.shape.image_size}x"
                                   f"{self.shape.image_size} here, as in training)")
        # (1, H, W, 3) per camera: this step's frame. Copies: arrays off the wire are read-only.
        return combine_views([np.array(view)[None] for view in views], self.shape.image_size, self.shape.views)[0]

    def _check_state(self, state, where: str) -> np.ndarray:
        if not self.shape.state_dim:
            raise RequestError(f"{where}.state: this model takes no state (framework.action_model.state_dim=0); drop it")
        if not isinstance(state, np.ndarray) or state.dtype.kind not in "fiu":
            raise RequestError(f"{where}.state must be a numeric numpy array of {self.shape.state_dim} values")
        if state.size != self.shape.state_dim or state.ndim > 2:
            raise RequestError(f"{where}.state has shape {state.shape}; this model takes (1, {self.shape.state_dim}) "
                               "(normalised as in training, zero-padded to framework.action_model.state_dim)")
        if not np.isfinite(state).all():
            raise RequestError(f"{where}.state holds NaN or infinite values")
        return state.reshape(1, self.shape.state_dim).astype(np.float32)  # a native-order copy

    def infer(self, examples: list[dict]) -> dict[str, np.ndarray]:
        """normalized_actions (B, chunk, action_dim), as the original's server; actions: the same in robot units.

        An example with a `seed` draws all its noise from a generator of its own, so its actions are the same alone
        or in any batch; when some do, the others get generators seeded from torch's generator. When none does,
        the noise comes from torch's generator, as a direct predict_action call draws it."""
        generators = None
        if any("seed" in example for example in examples):
            generators = [torch.Generator().manual_seed(example["seed"] if "seed" in example else
                                                        int(torch.randint(SEED_RANGE[1], ())))
                          for example in examples]
        if self.clock is not None:
            self.clock.measure()
        normalized = self.model.predict_action(examples, generators=generators)["normalized_actions"]
        started = time.perf_counter()
        answer = {"normalized_actions": normalized.astype(np.float32), "actions": self.unnormalize(normalized)}
        if self.clock is not None:
            self.clock.add("unnormalise", time.perf_counter() - started)
            answer["stage_ms"] = np.tile(np.asarray(self.clock.stage_ms(), dtype=np.float64), (len(examples), 1))
        return answer


def _check_count(value, where: str, low: int, high: int, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not low <= int(value) <= high:
        raise RequestError(f"{where} is {value!r}; give an integer from {low} to {high} ({what})")
    return int(value)


def _check_seed(seed, where: str) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
            or not SEED_RANGE[0] <= int(seed) <= SEED_RANGE[1]:
        raise RequestError(f"{where}.seed is {seed!r}; a seed is an integer in {SEED_RANGE[0]}..{SEED_RANGE[1]} "
                           "(the example's noise; omit it for fresh noise)")
    return int(seed)
