"""`python -m DiT4DiT.tools.doctor`, the name the README gave the doctor; it lives in DiT4DiT.doctor now."""

from DiT4DiT.doctor.checks import main

if __name__ == "__main__":
    raise SystemExit(main())
