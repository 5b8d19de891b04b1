"""The real-GPU check (issue 33), split into short modules; ``bench/real_gpu.py`` is the entry.

Standard library, ``pynvml`` (nvidia-ml-py) and, for the CUDA stages, ``torch``: nothing else, since the
GPU machine it is written for has no network to install anything. The NVML probe imports nothing of
the agent, so that it can run as an unprivileged user from a copy of this folder.
"""
