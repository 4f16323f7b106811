"""The problem's vocabulary: networks, ops and their slicing semantics, dtypes, and the plan types.

Ground floor: imports only :mod:`lgopt.errors` (and networkx).  Everything above reads these types.
"""
