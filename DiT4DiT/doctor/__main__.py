from DiT4DiT.requirements_check import CONFIG, require

require("python -m DiT4DiT.doctor", CONFIG)

from DiT4DiT.doctor.checks import main  # noqa: E402 (after the check: it reads configs with the packages checked)

raise SystemExit(main())
