"""``python -m jobq ...`` is ``jobq ...``."""

from jobq.cli.main import main

if __name__ == "__main__":
    main()
