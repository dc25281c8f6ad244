"""What this server's stored results say, read by one stated rule each: the device's
calibration (calibration.py), the power it draws while training (power.py), the train rate a
data loader must keep up with (train_rate.py), and a burn-in's fleet statistics (burn_in.py).
Every reader of past measurements goes through here."""
