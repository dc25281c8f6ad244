"""The probes, torch-free: what each accepts, reports and predicts, and how its results are
shown. registry.py lists them; app/bench/ holds their torch side."""
