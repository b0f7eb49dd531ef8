"""``python -m memtape ...``: the same as the ``memtape`` command."""

from memtape.cli import main

main()
