"""The host end of the serial link to a board: the bridge protocol and the link over a tty (no Amaranth)."""
