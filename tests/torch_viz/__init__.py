"""PyTorch's real memory_viz CLI (``torch/cuda/_memory_viz.py``) as a test oracle.

``fetch_memory_viz`` gets the file from the pinned torch wheel on PyPI without
installing torch; ``memory_viz`` loads it and runs its commands on a snapshot pickle.
"""
