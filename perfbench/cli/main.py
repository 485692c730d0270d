"""`python -m perfbench.cli.main` (the same as the `perfbench` console script)."""

from perfbench.cli import main

if __name__ == "__main__":
    main()
