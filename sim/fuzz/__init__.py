"""Generated scenarios (Hypothesis): cases, the oracle that judges an engine's outcome, the RTL batch runner and the campaign."""
