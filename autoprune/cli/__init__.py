"""The ``autoprune`` command: main.py (parser and entry point), commands.py (what each
subcommand does; export and report: deploy.py), config_file.py (YAML configs), doctor.py (installed
against tested versions), demo.py (the one-call Fashion-MNIST demo)."""
from .main import build_parser, main

__all__ = ["build_parser", "main"]
