"""Benchmarks and experiments (not installed): run each script as a module from the repository root,
``python -m bench.<group>.<script> --help``; see bench/README.md."""
