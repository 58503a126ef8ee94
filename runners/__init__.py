"""Entry points (`python -m runners.<name>`). Importing the package refuses a Python tierbench does not run on,
in one line, before anything else is imported: pip refuses it at install time (requires-python), this catches a
checkout run with another interpreter. Kept to syntax every Python 3 parses."""

import platform
import sys

# pyproject.toml's requires-python (a test keeps the two equal). Not 3.13: numpy<2, which nvidia-pytriton 0.7.0
# (the bundled Triton) and tritonclient 2.51 require, has no wheels for it; not 3.10: the code and several
# dependencies (onnxruntime >= 1.24, pandas 3, matplotlib 3.11) need 3.11.
SUPPORTED_PYTHON = ((3, 11), (3, 12))

if tuple(sys.version_info[:2]) not in SUPPORTED_PYTHON:
    sys.exit("error: tierbench runs on Python {} and this is Python {} ({}). Create the venv with one of them, "
             "e.g. `python3.12 -m venv .venv`; every node of a Ray cluster and its head need the same minor version "
             "(docs/getting-started.md#install).".format(" or ".join("{}.{}".format(*v) for v in SUPPORTED_PYTHON),
                                          platform.python_version(), sys.executable))
