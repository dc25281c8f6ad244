"""Families still to come (dense); each entry is a family.Family."""

from app.accounting.hf.family import Family

FAMILIES: tuple[Family, ...] = ()
