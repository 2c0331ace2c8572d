"""Test double for `mx_driving` with the 2.0 patcher API (DrivingSDK master, PyPI 26.1/26.2 wheels).

Put `tests/fakes/mx_driving_v2` on PYTHONPATH (with `tests/fakes/torch_npu`: like the real
package, importing it imports torch_npu and transfer_to_npu, and calls logging.basicConfig(INFO)
as the real get_chip_info does). It has none of the real operators and no compiled `_C` extension;
only the patcher's interface, which records its calls. Like the real 26.x package, its import puts its own
operator folder in front of ASCEND_CUSTOM_OPP_PATH.
"""

import logging
import os

import torch_npu  # noqa: F401
from torch_npu.contrib import transfer_to_npu  # noqa: F401

logging.basicConfig(level=logging.INFO)
_OPP = os.path.join(os.path.dirname(__file__), "packages", "vendors", "customize")
os.environ["ASCEND_CUSTOM_OPP_PATH"] = ":".join(filter(None, [_OPP, os.environ.get("ASCEND_CUSTOM_OPP_PATH")]))
