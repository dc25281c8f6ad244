"""Tally: deep-learning resource accounting."""

__version__ = "0.1.0"
