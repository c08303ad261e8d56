"""The parts of `python -m engine`; engine/cli.py holds the list of commands."""
