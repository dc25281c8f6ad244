"""The fleet: many GPU boxes on one queue, and the burn-in that compares their GPUs."""
