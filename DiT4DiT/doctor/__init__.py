"""The doctor: is this machine ready to train? (`python -m DiT4DiT.doctor`), with the memory and prompt-store
estimates it compares against the machine."""
