"""Bounded model checking of the engine's invariants (Amaranth Assert/Assume, yosys, yosys-smtbmc with z3)."""
