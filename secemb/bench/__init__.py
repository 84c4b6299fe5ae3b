"""Benchmarks behind ``secemb bench``: every figure is measured in the run that prints it."""
