"""python -m DiT4DiT.launch: the launcher (DiT4DiT/launch/run.py)."""

from DiT4DiT.launch.run import main

if __name__ == "__main__":
    raise SystemExit(main())
