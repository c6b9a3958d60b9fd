"""The tool flow: out-of-context estimate, board build, PLL configuration, report parsing (YoWASP tools)."""
