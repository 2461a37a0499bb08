"""``python -m jobq ...`` is ``jobq ...``."""

from jobq.cli import main

if __name__ == "__main__":
    main()
