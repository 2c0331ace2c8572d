"""Print (or write elsewhere) the meta/modality.json that training derives for a LeRobot dataset and a data config.

    python -m DiT4DiT.tools.modality DIR --data_config robotwin [--out FILE]

Edit the result and put it at DIR/meta/modality.json to change the mapping: an explicit modality.json always
wins. Exit status 1 with a one-line message when the dataset's features do not fit the data config, 2 when
--out is refused (see DiT4DiT/host/output_paths.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __name__ == "__main__":  # before the imports below: a missing package is one line, not a traceback
    from DiT4DiT.requirements_check import DATA_TOOLS, require
    require("python -m DiT4DiT.tools.modality", DATA_TOOLS)

from DiT4DiT.atomic_files import write_json_atomic
from DiT4DiT.dataloader.data_configs import DATA_CONFIGS
from DiT4DiT.dataloader.modality import AUTO, choose_config, derive_modality
from DiT4DiT.dataloader.reader import DatasetLayout
from DiT4DiT.errors import run_main
from DiT4DiT.host.output_paths import check_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DiT4DiT.tools.modality", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="LeRobot dataset folder (holds meta/info.json)")
    parser.add_argument("--data_config", required=True, choices=[AUTO, *DATA_CONFIGS], metavar="NAME",
                        help=f"data config: auto or one of {', '.join(DATA_CONFIGS)}")
    parser.add_argument("--out", type=Path, default=None, help="write the file here instead of printing it "
                        "(never into the dataset folder)")
    args = parser.parse_args(argv)
    return run_main(lambda: write_modality(args.dataset, args.data_config, args.out))


def write_modality(dataset: Path, data_config: str, out: Path | None) -> None:
    layout = DatasetLayout(dataset)
    config = choose_config(layout, data_config)
    modality = derive_modality(layout.info, config, layout.meta_path("info.json"))
    if out:  # never into the dataset: write elsewhere, edit, then copy it to meta/modality.json
        check_out(out)
        write_json_atomic(out, modality)
        print(f"{out}: modality.json for data config {config.name}")
    else:
        print(json.dumps(modality, indent=4))


if __name__ == "__main__":
    sys.exit(main())
