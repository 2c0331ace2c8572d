"""Test double for `mx_driving` with the 1.0 patcher API (DrivingSDK branches up to v26.0.0).

Put `tests/fakes/mx_driving_v1` on PYTHONPATH (with `tests/fakes/torch_npu`: like the real
package, importing it imports torch_npu and transfer_to_npu, and calls logging.basicConfig(INFO)
as the real get_chip_info does). It has none of the real operators and no compiled `_C` extension;
only the patcher's interface, which records its calls.
"""

import logging

import torch_npu  # noqa: F401
from torch_npu.contrib import transfer_to_npu  # noqa: F401

logging.basicConfig(level=logging.INFO)
