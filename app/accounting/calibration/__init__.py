"""Calibration: what a device model has measured, as the calculators use it in place of datasheet
peaks and scalar efficiencies. Pure functions over the profile's numbers (profile.py): a matmul
surface (surface.py), a train step timed from it (step.py), fitted by small least squares (lsq.py).
The store side (which runs a profile is built from) is app/measured/profile.py."""
