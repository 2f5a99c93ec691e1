"""Engine interop: the requirements of each engine's venv, its driver (run with that venv's
python) and the harness the pytest suites call it through."""
