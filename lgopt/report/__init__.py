"""What a person reads: group tables and LMEM pictures (:mod:`.tables`), strategies side by side
(:mod:`.compare`) and chip sweeps (:mod:`.sweep`).

May import everything below it; only :mod:`lgopt.cli` imports it.
"""
