"""Board gateware: the engine and scratch cores, the UART bridge, the board top (Amaranth)."""
