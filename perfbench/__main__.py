"""`python -m perfbench` (the same as the `perfbench` console script)."""

from perfbench.cli import main

main()
