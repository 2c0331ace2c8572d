"""Evaluating a trained policy: open-loop against recorded episodes, and LIBERO / RoboCasa rollouts through the server."""
