"""The accounting engine: pure functions over numbers and dataclasses.

Nothing here imports fastapi or torch. Every function takes plain values and
returns a dataclass that carries its own breakdown, so the API layer only
validates input and shapes JSON.
"""
