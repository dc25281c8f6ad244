"""Families still to come (moe); each entry is a family.Family."""

from app.accounting.hf.family import Family

FAMILIES: tuple[Family, ...] = ()
