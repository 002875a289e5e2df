"""Where tool and reward code runs off the event loop: daemon threads, worker processes, and
the Python sandbox. Nothing here imports the rest of :mod:`agentfly.rollout`."""
